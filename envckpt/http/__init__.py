"""The checkpoint control protocol over real HTTP: routes, an aiohttp transport, uvicorn helpers."""
