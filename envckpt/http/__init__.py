"""The checkpoint control protocol over real HTTP: routes, an httpx transport, uvicorn helpers."""
