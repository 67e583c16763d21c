"""Python source that runs a fresh interpreter as a core-only install: the extras' packages
cannot be imported (a meta path finder refuses them by name).

    subprocess.run([sys.executable, "-c", BLOCK_EXTRAS + "import envckpt\n..."])
"""

from __future__ import annotations

EXTRA_PACKAGES = frozenset({"fastapi", "uvicorn", "httpx", "aiohttp", "starlette", "ray"})

BLOCK_EXTRAS = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {sorted(EXTRA_PACKAGES)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Block())
"""
