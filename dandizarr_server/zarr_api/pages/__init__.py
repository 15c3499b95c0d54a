"""The service's pages for people: a home page, archive pages with a tree browser, batch
history, the Zarr arrays an archive holds and a PNG preview of each (server-rendered HTML, a
stylesheet of the project's own, nothing from another host)."""
