# The unique (archive, path) index serves look-ups by archive; a second index on the archive
# alone let PostgreSQL probe paths by the archive where its statistics were stale (issue #39).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("zarr_api", "0009_multipart_upload"),
    ]

    operations = [
        migrations.AlterField(
            model_name="shardmember",
            name="archive",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="members",
                to="zarr_api.zarrarchive",
            ),
        ),
    ]
