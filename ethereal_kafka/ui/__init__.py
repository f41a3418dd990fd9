"""The web UI: the job's stream graph, its checkpoint timeline, its latency and the job page (docs/ui.md).

A layer above `runtime`: it reads the checkpoint history, the plan description and the live metrics, and is never
imported by the layers below except through the runner's hook (`runtime.runner.open_ui`). `ui.live` serves a
running job from its driver; `ui.offline` serves a stopped app (`ethereal-kafka ui APP`); `ui.server` is the HTTP
server both use, `ui.views` the JSON they share, `static/` the pages and the vendored libraries.
"""
