"""The vendor layer: what every sink of one vendor's services shares.

``http`` holds what any HTTP service needs (``Retry-After``, importing an optional client);
``aws``, ``google`` and ``azure`` hold one vendor's credentials, sessions and error map each.
A sink imports its client and classifies its errors through here, never by itself.
"""
