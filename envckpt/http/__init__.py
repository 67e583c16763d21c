"""The checkpoint control protocol over real HTTP: routes, a keep-alive client, uvicorn."""
