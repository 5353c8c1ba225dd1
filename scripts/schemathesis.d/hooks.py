"""Positive cases made to obey the server's rules that a schema cannot state (each listed in
docs/RELIABILITY.md): rules relative to the server's clock, between two parameters, and in bytes
where JSON Schema counts characters. Negative cases are left as generated."""

import datetime
import os
import re

import schemathesis

MAX_DAYS = 366
#: Event timestamps may run at most 10 minutes ahead of the server's clock.
SKEW = datetime.timedelta(minutes=10)
#: A settings change takes effect at the earliest the settings cache lifetime (10 s) plus
#: 10 minutes after it is made.
LEAD = datetime.timedelta(minutes=11)


def _positive(case):
    meta = getattr(case, "meta", None)
    mode = getattr(getattr(getattr(meta, "generation", None), "mode", None), "is_positive", True)
    return bool(mode)


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def _day(text):
    try:
        return datetime.date.fromisoformat(text)
    except (TypeError, ValueError):
        return None


def _range(query):
    """`from` ≤ `to`, at most 366 days apart."""
    first, last = _day(query.get("from")), _day(query.get("to"))
    if first is None or last is None:
        return
    if last < first:
        first, last = last, first
    if (last - first).days >= MAX_DAYS:
        last = first + datetime.timedelta(days=MAX_DAYS - 1)
        if last.year > 9998:
            first, last = last - datetime.timedelta(days=MAX_DAYS - 1), first
            first, last = min(first, last), max(first, last)
    query["from"], query["to"] = first.isoformat(), last.isoformat()


def _instant(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            return datetime.datetime.fromtimestamp(value / 1000, datetime.timezone.utc)
        except (OverflowError, OSError, ValueError):
            return datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)
    if isinstance(value, str):
        try:
            return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def _event(event):
    """An event's timestamp not ahead of the clock (nor, after its offset, before 2000)."""
    if not isinstance(event, dict) or "timestamp" not in event:
        return
    instant = _instant(event["timestamp"])
    earliest = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    if instant is None or instant.tzinfo is None:
        return
    if instant > _now() + SKEW or instant < earliest:
        event["timestamp"] = int(_now().timestamp() * 1000) - 1000
    _user_data(event)


def _fits(text, limit):
    return len(text.encode()) <= limit


def _user_data(event):
    """user_data's bounds are bytes; the schema's maxLength counts characters."""
    data = event.get("user_data")
    if not isinstance(data, dict):
        return
    event["user_data"] = {
        key if _fits(key, 64) else key.encode()[:64].decode(errors="ignore") or "k":
        value if _fits(value, 1024) else value.encode()[:1024].decode(errors="ignore")
        for key, value in data.items()
        if isinstance(key, str) and isinstance(value, str)
    }


def _seconds(params):
    """A beacon's timestamp (epoch seconds) not ahead of the clock."""
    stamp = params.get("timestamp")
    if isinstance(stamp, str) and re.fullmatch(r"[0-9]+(\.[0-9]*)?", stamp):
        if float(stamp) > (_now() + SKEW).timestamp():
            params["timestamp"] = str(int(_now().timestamp()) - 1)


@schemathesis.hook
def map_case(context, case):
    if not _positive(case):
        return case
    if isinstance(case.query, dict):
        _range(case.query)
        if case.operation.path == "/track":
            _seconds(case.query)
        dimension = case.query.get("dimension")
        if isinstance(dimension, str) and dimension.startswith("user_data."):
            key = dimension[len("user_data."):]
            if not _fits(key, 64):
                case.query["dimension"] = "user_data." + (key.encode()[:64].decode(errors="ignore") or "k")
    if case.operation.path == "/track":
        # Beacons count only for a registered site: the seeded one.
        if isinstance(case.query, dict) and "site" in case.query:
            case.query["site"] = os.environ["SEED_SITE"]
        if isinstance(case.body, dict) and "site" in case.body:
            case.body["site"] = os.environ["SEED_SITE"]
        if isinstance(case.body, dict):
            _seconds(case.body)
    body = case.body
    if isinstance(body, list):
        for event in body:
            _event(event)
    elif isinstance(body, dict):
        _event(body)
        if "effective_from" in body and isinstance(body["effective_from"], str):
            instant = _instant(body["effective_from"])
            if instant is not None and instant.tzinfo is not None:
                if instant < _now() + LEAD or instant > _now() + datetime.timedelta(days=365):
                    body["effective_from"] = (_now() + datetime.timedelta(hours=1)).isoformat()
    return case
