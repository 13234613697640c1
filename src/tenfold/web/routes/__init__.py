"""The endpoints, one APIRouter per module (FastAPI's "Bigger Applications" layout); `create_app`
includes them in the order the OpenAPI schema lists them."""
