"""GET /api/catalog lists the shipped catalogs."""

from tenfold.web.schemas import GPU_NAMES, MODEL_NAMES


def test_catalog(client):
    r = client.get("/api/catalog")
    assert r.status_code == 200
    d = r.json()
    assert [m["name"] for m in d["models"]] == list(MODEL_NAMES)
    b200 = next(h for h in d["hardware"] if h["name"] == "b200")
    assert b200["hbm_GiB"] > 170 and "nvfp4" in b200["block_scaled_formats"]
    assert [h["name"] for h in d["hardware"]] == list(GPU_NAMES)
