# Big files of write sessions (docs/writing.md): a multipart upload may belong to a session.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("zarr_api", "0011_write_sessions"),
    ]

    operations = [
        migrations.AddField(
            model_name="multipartupload",
            name="session",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="multipart",
                to="zarr_api.writesession",
            ),
        ),
    ]
