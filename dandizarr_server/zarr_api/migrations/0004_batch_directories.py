"""Batch.directories: an open upload batch's directories, so files joining it are checked
against them without reading all of its files. Filled for the upload batches open now."""

from typing import Any

from django.db import migrations, models


def fill_open_batches(apps: Any, schema_editor: Any) -> None:
    Batch = apps.get_model("zarr_api", "Batch")
    BatchFile = apps.get_model("zarr_api", "BatchFile")
    for batch in Batch.objects.filter(state="open", kind="upload"):
        directories: set[str] = set()
        for path in BatchFile.objects.filter(batch=batch).values_list("path", flat=True):
            parts = path.split("/")
            directories.update("/".join(parts[:i]) for i in range(1, len(parts)))
        batch.directories = sorted(directories)
        batch.save(update_fields=["directories"])


class Migration(migrations.Migration):
    dependencies = [
        ("zarr_api", "0003_batch_intents_and_reconciliation"),
    ]

    operations = [
        migrations.AddField(
            model_name="batch",
            name="directories",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(fill_open_batches, migrations.RunPython.noop),
    ]
