"""The engine: models loaded and kept resident, requests admitted, batched and decoded, answers
and explanations built. Usable without the web layer (no FastAPI, Starlette or uvicorn here);
``attnscope.serving`` is a thin HTTP door onto :class:`attnscope.engine.service.ModelService`."""
