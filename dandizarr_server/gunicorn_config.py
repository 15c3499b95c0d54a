"""gunicorn's settings for the production web service, whatever starts it (docker-compose.yml,
the Dockerfile, the tests' production shape):
``gunicorn -c python:dandizarr_server.gunicorn_config dandizarr_server.wsgi --bind ... --workers
N``.

The worker is ``dandizarr serve``'s (``dandizarr_server.gunicorn_worker``), which reads request
heads in
its loop and bounds slow bodies: gunicorn's default sync worker reads each request in its one
thread with no deadline, so as many slow clients as there are workers stall the service
(gunicorn asks for a buffering proxy in front of the sync worker; docker-compose.yml has none).
"""

from dandizarr_server.gunicorn_worker import HeadFirstThreadWorker

worker_class = HeadFirstThreadWorker
# Requests served at once per worker process. Each thread keeps a database connection: 4 workers
# hold 32 of PostgreSQL's default 100.
threads = 8
