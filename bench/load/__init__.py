"""The load test (issue #39): many uploaders and readers at once, through Locust, against the
production shape on this machine. ``make load`` runs it (``python -m bench load``); the short
version is ``tests/production/test_load_live.py``. What each module does:

- ``plan``: what the driver hands Locust's process (the service, the uploaders' tokens and
  sources, what the readers read) and the route classes requests are counted under;
- ``sources``: the local Zarr arrays the uploaders grow between uploads;
- ``uploader``: one uploader's process, the client library (``DandizarrClient``) uploading on
  command and telling each request it made;
- ``locustfile``: the Locust users (uploaders driving those processes, readers over HTTP);
- ``run``: the driver: the stack, the seed data, Locust, the kills, the checks, the table.
"""
