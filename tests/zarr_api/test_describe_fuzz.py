"""The service's describing code never fails on a stranger's metadata, proved by a fuzzer
(issue #47): for any archive of ``zarr.json``, ``.zarray``, ``.zattrs``, ``.zgroup`` and
``.zmetadata`` documents (tests/support/metadata_strategies.py: an OME image and its levels,
labels, a plain array, consolidated metadata, each document any JSON or valid with hostile
values anywhere), what the archive page, ``/api/zarr/{id}/ome/`` and the preview compute
before reading a chunk raises nothing, each call under tests/support/cost_bounds.py's CPU and
memory bound: the scan (``pages.archive_scan``, each array through ``describe_document``), the
overview (the OME description and its validation: ``pages.ome.overview``), each array's
preview plan, each image's preview choice and problem, the viewer links and the API's JSON.

And no answer comes from the boundary's backstop: every array the readers could not read says
why in their words (a MetadataError's), not ``CANNOT_DESCRIBE``: the readers are total by
construction, the backstop is for bugs.

Called directly, without HTTP (tests/support/memory_archive.py holds the archive): the corpus
walk (test_hostile_metadata.py) takes its cases through every route. ``make test`` runs
SERVICE_EXAMPLES examples; ``make fuzz`` FUZZ_EXAMPLES.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings

from dandizarr_server.zarr_api.pages.archive_scan import scan_archive
from dandizarr_server.zarr_api.pages.arrays import (
    CANNOT_DESCRIBE,
    plane_plan,
    plane_read_cost,
    read_geometry,
)
from dandizarr_server.zarr_api.pages.ome import overview
from tests.support.cost_bounds import bounded, traced_memory
from tests.support.hypothesis_profiles import fuzz_examples
from tests.support.memory_archive import MemoryFiles, MemoryTree
from tests.support.metadata_strategies import archives

SERVICE_EXAMPLES = 1000
BASE_URL = "http://testserver/zarr/0123/"


@settings(
    max_examples=fuzz_examples(SERVICE_EXAMPLES),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(files=archives())
def test_describing_an_archive_never_fails_and_is_bounded(files: dict[str, bytes]) -> None:
    with traced_memory():
        scan = bounded(scan_archive, MemoryTree(files), MemoryFiles(files))
        described = bounded(overview, scan)
        for array in described.arrays:
            assert not (array.preview_problem or "").startswith(CANNOT_DESCRIBE), array
            assert len(array.codecs) <= 16 and len(array.preview_problem or "") <= 500
            if array.metadata is not None:
                bounded(plane_plan, array.metadata)
                bounded(plane_read_cost, array.metadata)
                bounded(read_geometry, array.metadata)
        for image in described.summary.images:
            bounded(described.preview_problem, image)
        bounded(described.plain_arrays)
        bounded(described.viewer_links, BASE_URL)
        bounded(lambda: json.dumps(described.as_json(BASE_URL)))
