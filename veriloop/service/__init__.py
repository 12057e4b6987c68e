"""The service face: FastAPI app (REST API, OpenAI-compatible endpoints, dashboard) and executors."""
