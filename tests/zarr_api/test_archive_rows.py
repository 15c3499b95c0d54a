"""``selectors.archive_rows``: the archive and its dandiset as the ORM's ``select_related`` reads
them (every field, JSON and times converted), in one statement whose SQL is compiled once; and
never stale: each call reads the row (a draft's change, an embargo, at once)."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dandizarr_server.zarr_api.edge.exceptions import NotFound
from dandizarr_server.zarr_api.models import Dandiset, ZarrArchive
from dandizarr_server.zarr_api.selectors import archive_rows
from dandizarr_server.zarr_api.selectors.archive_rows import archive_row
from dandizarr_server.zarr_api.selectors.lookups import archive_get


def _fields(instance: object, model: type) -> dict[str, object]:
    return {f.attname: getattr(instance, f.attname) for f in model._meta.concrete_fields}


@pytest.mark.django_db
def test_the_row_is_the_orms_and_its_sql_compiled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_rows, "_compiled", {})
    dandiset = Dandiset.objects.create(name="rows")
    archive = ZarrArchive.objects.create(
        name="a.zarr", dandiset=dandiset, garbage={"held": 3, "names": ["x"]}, checksum="c" * 32
    )
    compiles = []
    compile_ = archive_rows._compile
    monkeypatch.setattr(archive_rows, "_compile", lambda *a: compiles.append(a) or compile_(*a))
    expected = ZarrArchive.objects.select_related("dandiset").get(pk=archive.pk)
    for column, value in [("zarr_id", archive.zarr_id), ("pk", archive.pk)] * 3:
        with CaptureQueriesContext(connection) as queries:
            found = archive_row(column, value)
        assert len(queries) == 1
        assert found is not None
        assert _fields(found, ZarrArchive) == _fields(expected, ZarrArchive)
        assert _fields(found.dandiset, Dandiset) == _fields(expected.dandiset, Dandiset)
        assert found.garbage == {"held": 3, "names": ["x"]}
        assert found.as_of is None and not found._state.adding
    assert [c[1] for c in compiles] == ["zarr_id", "pk"]
    assert archive_row("zarr_id", uuid.uuid4()) is None
    assert archive_row("pk", archive.pk + 1000) is None


@pytest.mark.django_db
def test_every_look_up_reads_the_row_now() -> None:
    dandiset = Dandiset.objects.create(name="moving")
    archive = ZarrArchive.objects.create(name="m.zarr", dandiset=dandiset)
    anonymous = AnonymousUser()
    assert archive_get(archive.zarr_id, anonymous).checksum == archive.checksum
    ZarrArchive.objects.filter(pk=archive.pk).update(checksum="d" * 32, file_count=7)
    moved = archive_get(archive.zarr_id, anonymous)
    assert (moved.checksum, moved.file_count) == ("d" * 32, 7)
    Dandiset.objects.filter(pk=dandiset.pk).update(embargo_status=Dandiset.EmbargoStatus.EMBARGOED)
    with pytest.raises(NotFound):
        archive_get(archive.zarr_id, anonymous)
