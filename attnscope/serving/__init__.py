"""The web layer: a thin FastAPI app over one service object."""
