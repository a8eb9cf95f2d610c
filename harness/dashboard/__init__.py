"""``fleet dashboard``: the sweeps of a results directory in a browser (docs/dashboard.md).

A server-rendered Starlette app: Jinja2 templates with every stored string escaped, a little plain JavaScript
(filters, live updates over server-sent events), no front-end build step. Pages are modules of this package,
each with its ``ROUTES``; ``app.make_app`` mounts them. ``export`` writes the same pages as static files.
"""
