"""``seqlab serve RUN --ensemble RUN2`` for a language model: POST /generate samples from the
runs' linear pool; a run pooled with itself samples what the run alone samples."""

from fastapi.testclient import TestClient

from seqlab import api
from seqlab.serve import Limits, create_app


def test_generate_from_a_pool_of_a_run_with_itself_equals_the_run(lm_dir, lm_model):
    body = {"prompt": "to be", "max_tokens": 24, "temperature": 0.7, "seed": 5}
    with TestClient(create_app(lm_model, Limits())) as client:
        alone = client.post("/generate", json=body).json()
    pool = api.load_ensemble([lm_dir, lm_dir])
    with TestClient(create_app(pool, Limits())) as client:
        info = client.get("/info").json()
        pooled = client.post("/generate", json=body).json()
    assert type(pool.model).__name__ == "LMEnsemble" and len(info["members"]) == 2
    assert pooled == alone and len(alone["continuation"]) > 0
