"""The page, the Plotly bundle it loads from this server, and the OpenAPI schema."""


def test_page_and_bundle(client):
    page = client.get("/")
    assert page.status_code == 200 and '<script src="/static/plotly.js">' in page.text
    assert "https://" not in page.text and "http://" not in page.text
    js = client.get("/static/plotly.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("application/javascript")
    assert "plotly.js" in js.text[:200]
    schema = client.get("/openapi.json").json()
    assert {
        "/api/catalog",
        "/api/estimate/train",
        "/api/estimate/infer",
        "/api/search/train",
        "/api/compare",
    } == set(schema["paths"])
    assert client.get("/docs").status_code == 404  # the Swagger page would load a CDN script
