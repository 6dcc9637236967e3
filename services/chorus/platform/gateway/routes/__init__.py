"""The gateway's routes, one module per resource, each a module-level ``APIRouter``:
submissions (``submit``), workflows, approvals and the approval policy. What a route works
with comes by dependency injection (:mod:`chorus.platform.gateway.routes.deps`)."""
