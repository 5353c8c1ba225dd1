"""Seeds a fresh adevents server for scripts/schemathesis, so every query has data to answer and
every path parameter names something that exists; prints the ids as shell assignments, which
schemathesis.toml reads as ${NAME}.

Usage: seed.py BASE_URL   (ADEVENTS_ADMIN_KEY in the environment)
"""

import base64
import hashlib
import hmac
import json
import os
import sys
import time
import urllib.parse
import urllib.request
import uuid

BASE = sys.argv[1].rstrip("/")
ADMIN = os.environ["ADEVENTS_ADMIN_KEY"]
SITE = "schemathesis.example"


def call(method, path, body=None, expect=(200, 201, 204)):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {ADMIN}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request) as response:
        if response.status not in expect:
            raise SystemExit(f"{method} {path} answered {response.status}")
        text = response.read()
        if not response.headers.get("Content-Type", "").startswith("application/json"):
            return None
        return json.loads(text) if text else None


def main():
    advertiser, campaign, ad = (str(uuid.uuid4()) for _ in range(3))
    now_ms = int(time.time() * 1000)
    impressions = [
        {
            "impression_id": str(uuid.uuid4()),
            "advertiser_id": advertiser,
            "campaign_id": campaign,
            "ad_id": ad,
            "user_id": str(uuid.uuid4()),
            "timestamp": now_ms - 60_000 - i * 1000,
            "user_data": {"country": ["FR", "DE", "US"][i % 3]},
        }
        for i in range(30)
    ]
    call("POST", "/v1/impressions", impressions)
    clicks = [
        {key: event[key] for key in ("impression_id", "advertiser_id", "campaign_id", "ad_id")}
        | {"timestamp": now_ms - 30_000}
        for event in impressions[:5]
    ]
    call("POST", "/v1/clicks", clicks)
    call("PUT", f"/v1/advertisers/{advertiser}/campaigns/{campaign}", {"daily_cap": 1000})

    call("PUT", f"/v1/sites/{SITE}", {})
    for i in range(20):
        query = urllib.parse.urlencode(
            {"site": SITE, "guid": f"visitor-{i % 7}", "feature1": ["facebook.com", "google.com"][i % 2]}
        )
        call("GET", f"/track?{query}")

    ingest = call("POST", "/v1/keys", {"scope": "ingest", "advertiser_id": advertiser})
    spare_key = call("POST", "/v1/keys", {"scope": "read", "site": SITE})
    secret = call("POST", f"/v1/advertisers/{advertiser}/tag-secrets")
    spare_secret = call("POST", f"/v1/advertisers/{advertiser}/tag-secrets")

    # A click link signed as an ad server signs it, in the order schemathesis sends the
    # documented parameters; requests encodes them as urlencode does.
    link = {
        "a": advertiser,
        "c": campaign,
        "ad": ad,
        "imp": impressions[0]["impression_id"],
        "t": str(now_ms),
        "url": "https://landing.example/offer?x=1",
        "k": secret["id"],
    }
    signed = urllib.parse.urlencode(link)
    key = base64.urlsafe_b64decode(secret["secret"] + "=" * (-len(secret["secret"]) % 4))
    signature = base64.urlsafe_b64encode(hmac.new(key, signed.encode(), hashlib.sha256).digest())
    signature = signature.decode().rstrip("=")
    check = urllib.request.Request(f"{BASE}/c?{signed}&s={signature}", method="HEAD")
    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(check)
    except urllib.error.HTTPError as error:
        if error.code != 302:
            raise SystemExit(f"the signed click link answered {error.code}")

    values = {
        "ADVERTISER": advertiser,
        "CAMPAIGN": campaign,
        "AD": ad,
        "SITE": SITE,
        "INGEST_KEY_ID": ingest["id"],
        "SPARE_KEY_ID": spare_key["id"],
        "TAG_SECRET_ID": secret["id"],
        "SPARE_TAG_SECRET_ID": spare_secret["id"],
        "CLICK_IMP": link["imp"],
        "CLICK_T": link["t"],
        "CLICK_URL": link["url"],
        "CLICK_S": signature,
    }
    for name, value in values.items():
        print(f"SEED_{name}='{value}'")


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    main()
