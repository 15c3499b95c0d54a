"""What the app runs on: object storage, the ``.checksum`` tree in it, metrics, background
threads, task scheduling after commit, and the crash points tests inject."""
