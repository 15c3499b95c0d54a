# Write sessions (docs/writing.md): their rows, staged files, and the batch kind their
# commits make.

import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("zarr_api", "0010_shard_member_archive_index_dropped"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="batch",
            name="kind",
            field=models.CharField(
                choices=[
                    ("upload", "Upload"),
                    ("delete", "Delete"),
                    ("pack", "Pack"),
                    ("session", "Session"),
                ],
                max_length=16,
            ),
        ),
        migrations.CreateModel(
            name="WriteSession",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("session_id", models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("open", "Open"),
                            ("committed", "Committed"),
                            ("aborted", "Aborted"),
                            ("expired", "Expired"),
                        ],
                        default="open",
                        max_length=16,
                    ),
                ),
                ("base_sequence", models.BigIntegerField(default=0)),
                ("created", models.DateTimeField(auto_now_add=True)),
                ("expires", models.DateTimeField()),
                ("ended", models.DateTimeField(blank=True, null=True)),
                ("cleaned", models.BooleanField(default=False)),
                (
                    "archive",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="sessions",
                        to="zarr_api.zarrarchive",
                    ),
                ),
                (
                    "batch",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="zarr_api.batch",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["id"],
            },
        ),
        migrations.CreateModel(
            name="SessionFile",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("path", models.TextField()),
                ("deleted", models.BooleanField(default=False)),
                ("md5", models.CharField(blank=True, default="", max_length=32)),
                ("size", models.BigIntegerField(default=0)),
                ("key", models.TextField(blank=True, default="")),
                ("verified", models.BooleanField(default=False)),
                (
                    "session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="files",
                        to="zarr_api.writesession",
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="writesession",
            index=models.Index(fields=["state", "expires"], name="zarr_api_wr_state_61f2bb_idx"),
        ),
        migrations.AddIndex(
            model_name="sessionfile",
            index=models.Index(fields=["key"], name="zarr_api_se_key_1f25f1_idx"),
        ),
        migrations.AddConstraint(
            model_name="sessionfile",
            constraint=models.UniqueConstraint(
                fields=("session", "path"), name="unique_session_path"
            ),
        ),
    ]
