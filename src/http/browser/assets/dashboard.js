// The adevents dashboard. Plain ES2020, no dependencies. Everything that comes from the API is
// put into the page as text (textContent, createTextNode, setAttribute), never as markup.
"use strict";
(() => {
  const KEY_STORE = "adevents.dashboard.key";
  const SVG = "http://www.w3.org/2000/svg";
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  const DAY = /^\d{4}-\d{2}-\d{2}$/;

  const $ = (id) => document.getElementById(id);
  const el = {
    keyForm: $("key-form"), key: $("key"), forget: $("forget-key"), keyInfo: $("key-info"),
    query: $("query"), kind: $("kind"),
    campaignFields: $("campaign-fields"), advertiser: $("advertiser"), campaignList: $("campaign-list"),
    campaign: $("campaign"), groupBy: $("group-by"),
    siteFields: $("site-fields"), siteListField: $("site-list-field"), siteList: $("site-list"),
    site: $("site"), features: $("features"),
    from: $("from"), to: $("to"), tz: $("tz"), tzList: $("tz-list"), show: $("show"),
    status: $("status"), results: $("results"), totals: $("totals"),
    deliverySection: $("delivery-section"), delivery: $("delivery"), chart: $("chart"),
    adsSection: $("ads-section"), ads: $("ads"), csvAds: $("csv-ads"),
    rowsSection: $("rows-section"), rowsTitle: $("rows-title"), rows: $("rows"), csvRows: $("csv-rows"),
  };

  // ---------------------------------------------------------------- formatting

  const integer = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
  const compact = new Intl.NumberFormat(undefined, { notation: "compact", maximumFractionDigits: 1 });
  const percent = new Intl.NumberFormat(undefined, { style: "percent", minimumFractionDigits: 2, maximumFractionDigits: 2 });
  const decimal = new Intl.NumberFormat(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  const fmtCount = (v) => (typeof v === "number" && Number.isFinite(v) ? integer.format(v) : "—");
  const percentTick = new Intl.NumberFormat(undefined, { style: "percent", maximumFractionDigits: 6 });
  const fmtRatio = (v) => (typeof v === "number" && Number.isFinite(v) ? percent.format(v) : "—");
  // A value per currency ({"EUR": "1234.50", "JPY": "300"}) as the API's exact strings, never
  // parsed into numbers: "EUR 1234.50 · JPY 300"; `none` when there is none.
  const fmtMoney = (v, none = "—") => {
    const sums = v && typeof v === "object" ? Object.entries(v).filter(([, amount]) => typeof amount === "string") : [];
    return sums.length ? sums.map(([code, amount]) => `${code} ${amount}`).join(" · ") : none;
  };

  const CAMPAIGN_METRICS = [
    { key: "impressions", label: "Impressions" },
    { key: "clicks", label: "Clicks" },
    { key: "ctr", label: "CTR", ratio: true },
    { key: "unique_users", label: "Unique users" },
    { key: "billable_impressions", label: "Billable impressions" },
    // null (shown "—") when no impression of the period could be measured.
    { key: "viewable_rate", label: "Viewable rate", ratio: true, hint: "Viewable impressions ÷ measurable impressions" },
    { key: "engaged_impressions", label: "Engaged impressions", hint: "Impressions with a hover, click, expand, play, pause or complete" },
    { key: "conversions", label: "Conversions", hint: "Conversions credited to the campaign, post-click and post-view" },
    // 0 without clicks; may exceed 100 %: conversions count at their own time, clicks at theirs.
    { key: "conversion_rate", label: "Conversion rate", ratio: true, hint: "Post-click conversions ÷ clicks" },
    { key: "conversion_value", label: "Conversion value", money: true, hint: "The conversions' values, summed per currency" },
    { key: "invalid_impressions", label: "Invalid impressions" },
    { key: "invalid_clicks", label: "Invalid clicks" },
  ];
  const SITE_METRICS = [
    { key: "visits", label: "Visits" },
    { key: "unique_visitors", label: "Unique visitors" },
    { key: "invalid_visits", label: "Invalid visits" },
  ];
  const fmtMetric = (m, v) => (m.money ? fmtMoney(v) : m.ratio ? fmtRatio(v) : fmtCount(v));

  function node(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== undefined && value !== null && value !== false) e.setAttribute(name, String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      e.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) e.setAttribute(name, String(value));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // ---------------------------------------------------------------- dates and zones

  function browserZone() {
    try {
      return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
    } catch (_) {
      return "UTC";
    }
  }

  // Today's date in a zone, as YYYY-MM-DD (the browser's zone if the name is unknown to it).
  function today(zone) {
    let parts;
    try {
      parts = new Intl.DateTimeFormat("en-US", { timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit" })
        .formatToParts(new Date());
    } catch (_) {
      parts = new Intl.DateTimeFormat("en-US", { year: "numeric", month: "2-digit", day: "2-digit" })
        .formatToParts(new Date());
    }
    const get = (type) => parts.find((p) => p.type === type).value;
    return `${get("year")}-${get("month")}-${get("day")}`;
  }

  function addDays(day, n) {
    const [y, m, d] = day.split("-").map(Number);
    return new Date(Date.UTC(y, m - 1, d + n)).toISOString().slice(0, 10);
  }

  function setRange(days) {
    const to = today(el.tz.value.trim() || browserZone());
    el.to.value = to;
    el.from.value = addDays(to, -(days - 1));
  }

  const monthDay = (day) => {
    const [y, m, d] = day.split("-").map(Number);
    return new Date(Date.UTC(y, m - 1, d)).toLocaleDateString(undefined, { month: "short", day: "numeric", timeZone: "UTC" });
  };

  // A row label of the API ("2026-11-01", "2026-11-01T13:00:00+01:00", "2026-W44", "2026-11")
  // as a short axis label; `previous` is the last label shown, to print the day only when it changes.
  function axisLabel(label, previous) {
    if (DAY.test(label)) return monthDay(label);
    const hour = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})/.exec(label);
    if (hour) {
      const prev = previous && /^(\d{4}-\d{2}-\d{2})T/.exec(previous);
      if (prev && prev[1] === hour[1]) return hour[2];
      return hour[2] === "00:00" ? monthDay(hour[1]) : `${monthDay(hour[1])} ${hour[2]}`;
    }
    return label;
  }

  // ---------------------------------------------------------------- status

  function setStatus(text, state = "info") {
    el.status.textContent = text;
    el.status.dataset.state = state;
    el.results.setAttribute("aria-busy", state === "loading" ? "true" : "false");
  }

  // ---------------------------------------------------------------- API

  class ApiFailure extends Error {
    constructor(status, body, response, context) {
      const error = (body && typeof body === "object" && body.error) || {};
      super(typeof error.message === "string" ? error.message : "");
      this.status = status;
      this.code = typeof error.code === "string" ? error.code : "";
      this.errors = Array.isArray(error.errors) ? error.errors : [];
      const retry = response && Number.parseInt(response.headers.get("Retry-After") || "", 10);
      this.retryAfter = Number.isFinite(retry) ? retry : null;
      this.requestId = response ? response.headers.get("X-Request-Id") : null;
      this.context = context;
    }
  }

  class NetworkFailure extends Error {}

  function currentKey() {
    try {
      return sessionStorage.getItem(KEY_STORE) || "";
    } catch (_) {
      return "";
    }
  }

  let inflight = null; // the AbortController of the query on screen

  // GET a path of the API with the key; `context` words an error ("this campaign", "the sites").
  async function api(path, params, context, signal) {
    const key = currentKey();
    if (!key) throw new ApiFailure(401, { error: { message: "no key" } }, null, context);
    const query = params ? `?${params}` : "";
    let response;
    try {
      response = await fetch(path + query, {
        headers: { Authorization: `Bearer ${key}`, Accept: "application/json" },
        cache: "no-store",
        credentials: "omit",
        redirect: "error",
        signal,
      });
    } catch (e) {
      if (e && e.name === "AbortError") throw e;
      throw new NetworkFailure(e && e.message ? e.message : "the request failed");
    }
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (!response.ok) throw new ApiFailure(response.status, body, response, context);
    if (body === null || typeof body !== "object") throw new ApiFailure(response.status, { error: { message: "the answer was not JSON" } }, response, context);
    return body;
  }

  // An error in words for the status line.
  function describe(e) {
    if (e instanceof NetworkFailure) {
      return `Network error: the server could not be reached (${e.message}). Check the connection and retry.`;
    }
    if (!(e instanceof ApiFailure)) return `Unexpected error: ${e && e.message ? e.message : String(e)}`;
    const what = e.context || "this";
    const retry = e.retryAfter !== null ? `retry in ${e.retryAfter} s` : "retry in a moment";
    const detail = e.message ? ` (${e.message})` : "";
    switch (e.status) {
      case 400: {
        const fields = [...new Set(e.errors.map((x) => x && x.field).filter((f) => typeof f === "string" && f))];
        const notes = e.errors
          .filter((x) => x && typeof x.message === "string" && x.message && !e.message.includes(x.message))
          .map((x) => (x.field ? `${x.field}: ${x.message}` : x.message));
        let text = `400: ${e.message || "the request is invalid"}`;
        if (notes.length) text += ` — ${notes.join("; ")}`;
        if (fields.length) text += ` [fields: ${fields.join(", ")}]`;
        return text;
      }
      case 401:
        return "401: the key is not valid (or was revoked) — paste another key";
      case 403:
        return `403: this key may not read ${what}`;
      case 404:
        return `404: not found — ${what}${detail}`;
      case 408:
        return `408: the request timed out, retry`;
      case 429:
        return `429: too many requests, ${retry}`;
      case 503:
        return e.code === "overloaded"
          ? `503: the server is overloaded, ${retry}`
          : `503: the store is unavailable, ${retry}`;
      case 500:
        return `500: the server failed${e.requestId ? ` (request id ${e.requestId}, see its log)` : ""}`;
      default:
        return `${e.status}: ${e.message || "the request failed"}`;
    }
  }

  // Mark the inputs an API error names (from, to, tz, group_by, site, feature.<name>, …).
  function markFields(e) {
    for (const input of document.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
    if (!(e instanceof ApiFailure)) return;
    const ids = { from: "from", to: "to", tz: "tz", group_by: "group-by", advertiser_id: "advertiser", campaign_id: "campaign", site: "site" };
    for (const item of e.errors) {
      const field = item && typeof item.field === "string" ? item.field : "";
      let input = ids[field] ? $(ids[field]) : null;
      if (!input && field.startsWith("feature.")) {
        const name = field.slice("feature.".length);
        input = [...el.features.querySelectorAll("select")].find((s) => s.dataset.feature === name) || null;
      }
      if (input) input.setAttribute("aria-invalid", "true");
    }
  }

  function showError(e) {
    if (e && e.name === "AbortError") return;
    setStatus(describe(e), "error");
    markFields(e);
    // The key field is marked, not focused: focus moved there would take the next id the
    // reader types.
    if (e instanceof ApiFailure && e.status === 401) el.key.setAttribute("aria-invalid", "true");
  }

  // ---------------------------------------------------------------- key

  function describeKey(self) {
    const owner = self.advertiser_id ? ` of advertiser ${self.advertiser_id}` : self.site ? ` of site ${self.site}` : "";
    const name = self.name ? ` (“${self.name}”)` : "";
    return `Using ${/^[aeiou]/.test(self.scope) ? "an" : "a"} ${self.scope} key${owner}${name}, kept in this tab only.`;
  }

  let keyScope = null; // what /v1/keys/self said about the key in use

  async function useKey() {
    keyScope = null;
    campaignsFor = null;
    sitesLoaded = false;
    if (!currentKey()) {
      el.keyInfo.textContent = "No key yet: paste a read key. It is kept in this tab only.";
      return;
    }
    el.keyInfo.textContent = "Key kept in this tab only.";
    try {
      const self = await api("/v1/keys/self", null, "its own fields");
      keyScope = self;
      el.keyInfo.textContent = describeKey(self);
      if (self.advertiser_id && !el.advertiser.value.trim()) {
        el.advertiser.value = self.advertiser_id;
        setKind("campaign");
      } else if (self.site && !el.site.value.trim()) {
        el.site.value = self.site;
        setKind("site");
      }
      if (self.scope === "ingest" || self.scope === "metrics") {
        setStatus(`This is a ${self.scope} key: it cannot read reports. Paste a read key.`, "error");
      } else {
        setStatus("Key accepted. Pick a campaign or a site and press Show.", "ok");
      }
    } catch (e) {
      if (e instanceof ApiFailure && e.status !== 401) {
        el.keyInfo.textContent = "Key kept in this tab only.";
      } else {
        showError(e);
        return;
      }
    }
    if (el.kind.value === "campaign") loadCampaigns();
    else loadSites();
  }

  // The key as typed, without a "Bearer " prefix; a header value holds visible ASCII only.
  const typedKey = () => el.key.value.trim().replace(/^Bearer\s+/i, "");
  const KEY_CHARS = /^[\x21-\x7e]+$/;

  el.keyForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const key = typedKey();
    if (!key) {
      setStatus("Paste an API key first.", "error");
      el.key.focus();
      return;
    }
    if (!KEY_CHARS.test(key)) {
      refuse("A key is letters, digits and punctuation only (like adk_…): check what was pasted.", el.key);
      return;
    }
    try {
      sessionStorage.setItem(KEY_STORE, key);
    } catch (_) {
      setStatus("This browser refuses to keep the key (sessionStorage is unavailable).", "error");
      return;
    }
    el.key.value = key;
    useKey();
  });

  el.forget.addEventListener("click", () => {
    try {
      sessionStorage.removeItem(KEY_STORE);
    } catch (_) {
      /* nothing kept */
    }
    if (inflight) inflight.abort();
    keyScope = null;
    campaignsFor = null;
    sitesLoaded = false;
    el.key.value = "";
    el.keyInfo.textContent = "Key forgotten. Paste a key to continue.";
    clearResults();
    resetSelect(el.campaignList, "— type an advertiser id —");
    resetSelect(el.siteList, "— listing needs an admin key —");
    setStatus("The key was forgotten: nothing is kept in this tab any more.", "info");
  });

  // ---------------------------------------------------------------- campaign and site pickers

  function resetSelect(select, placeholder) {
    select.replaceChildren(node("option", { value: "" }, placeholder));
    select.disabled = true;
  }

  const span = (first, last) => (first && last ? ` (${first} → ${last})` : "");

  let campaignsFor = null;
  async function loadCampaigns() {
    const advertiser = el.advertiser.value.trim();
    if (!UUID.test(advertiser) || !currentKey() || advertiser === campaignsFor) return;
    campaignsFor = advertiser;
    resetSelect(el.campaignList, "Loading campaigns…");
    try {
      const answer = await api(`/v1/advertisers/${encodeURIComponent(advertiser)}/campaigns`, null, "the campaigns of this advertiser");
      if (el.advertiser.value.trim() !== advertiser) return;
      const campaigns = Array.isArray(answer.campaigns) ? answer.campaigns : [];
      if (!campaigns.length) {
        resetSelect(el.campaignList, "— no campaigns with events —");
        return;
      }
      el.campaignList.replaceChildren(node("option", { value: "" }, `— ${campaigns.length} campaign${campaigns.length > 1 ? "s" : ""} —`));
      for (const c of campaigns) {
        const id = String(c.campaign_id);
        el.campaignList.append(node("option", { value: id }, id + span(c.first_day, c.last_day)));
      }
      el.campaignList.disabled = false;
      el.campaignList.value = el.campaign.value.trim();
      if (el.campaignList.selectedIndex < 0) el.campaignList.selectedIndex = 0;
      if (campaigns.length === 1 && !el.campaign.value.trim()) {
        el.campaign.value = String(campaigns[0].campaign_id);
        el.campaignList.selectedIndex = 1;
      }
    } catch (e) {
      campaignsFor = null;
      resetSelect(el.campaignList, "— could not list: type the campaign id —");
      showError(e);
    }
  }

  let sitesLoaded = false;
  async function loadSites() {
    if (!currentKey() || sitesLoaded) return;
    if (keyScope && keyScope.scope !== "admin") {
      el.siteListField.hidden = true; // only admin keys may list sites
      return;
    }
    el.siteListField.hidden = false;
    sitesLoaded = true; // also while loading: one request at a time
    resetSelect(el.siteList, "Loading sites…");
    try {
      const answer = await api("/v1/sites", null, "the list of sites");
      const sites = Array.isArray(answer.sites) ? answer.sites : [];
      if (!sites.length) {
        resetSelect(el.siteList, "— no sites with beacons —");
        return;
      }
      el.siteList.replaceChildren(node("option", { value: "" }, `— ${sites.length} site${sites.length > 1 ? "s" : ""} —`));
      for (const s of sites) {
        const id = String(s.site);
        el.siteList.append(node("option", { value: id }, id + span(s.first_day, s.last_day)));
      }
      el.siteList.disabled = false;
      el.siteList.value = el.site.value.trim();
      if (el.siteList.selectedIndex < 0) el.siteList.selectedIndex = 0;
    } catch (e) {
      if (e instanceof ApiFailure && e.status === 403) {
        el.siteListField.hidden = true;
        setStatus("This key may not list sites: type the site id.", "info");
        el.site.focus();
      } else {
        sitesLoaded = false;
        resetSelect(el.siteList, "— could not list: type the site id —");
        showError(e);
      }
    }
  }

  el.campaignList.addEventListener("change", () => {
    if (el.campaignList.value) el.campaign.value = el.campaignList.value;
  });
  el.siteList.addEventListener("change", () => {
    if (el.siteList.value) {
      el.site.value = el.siteList.value;
      clearFeatures();
    }
  });
  let advertiserTimer = 0;
  el.advertiser.addEventListener("input", () => {
    clearTimeout(advertiserTimer);
    advertiserTimer = setTimeout(loadCampaigns, 400);
  });
  el.advertiser.addEventListener("change", loadCampaigns);
  el.site.addEventListener("change", clearFeatures);

  function setKind(kind) {
    el.kind.value = kind;
    const site = kind === "site";
    el.campaignFields.hidden = site;
    el.siteFields.hidden = !site;
    if (inflight) inflight.abort();
    clearResults();
    if (site) loadSites();
    else loadCampaigns();
  }
  el.kind.addEventListener("change", () => setKind(el.kind.value));

  // ---------------------------------------------------------------- feature filters

  function clearFeatures() {
    featuresFor = null;
    el.features.replaceChildren(node("p", { class: "hint" }, "Feature filters appear after the first query."));
  }

  let featuresFor = null; // "site|from|to|tz" of the filters on screen

  // The filter chosen: [[name, value]], "any" left out.
  function chosenFilter() {
    const filter = [];
    for (const select of el.features.querySelectorAll("select")) {
      if (select.selectedIndex > 0) filter.push([select.dataset.feature, select.options[select.selectedIndex].dataset.value]);
    }
    return filter;
  }

  function renderFeatures(features, keep) {
    const names = Object.keys(features || {}).sort();
    if (!names.length) {
      el.features.replaceChildren(node("p", { class: "hint" }, "No features in this range."));
      return;
    }
    const chosen = new Map(keep);
    const fields = names.map((name, i) => {
      const id = `feature-${i}`;
      const select = node("select", { id, "data-feature": name });
      select.append(node("option", { value: "" }, "any"));
      const values = Array.isArray(features[name]) ? features[name] : [];
      let found = false;
      for (const v of values) {
        const value = String(v.value);
        const option = node("option", { "data-value": value }, `${value === "" ? "(empty)" : value} · ${fmtCount(v.visits)}`);
        if (chosen.get(name) === value) {
          option.selected = true;
          found = true;
        }
        select.append(option);
      }
      if (chosen.has(name) && !found) {
        const option = node("option", { "data-value": chosen.get(name) }, chosen.get(name));
        option.selected = true;
        select.append(option);
      }
      select.addEventListener("change", () => run());
      return node("div", { class: "field" }, node("label", { for: id }, name), select);
    });
    el.features.replaceChildren(node("p", { class: "legend" }, "Filter by feature (top 50 values)"), ...fields);
  }

  // ---------------------------------------------------------------- results

  let tables = { rows: null, ads: null }; // what the CSV buttons download

  function clearResults() {
    el.totals.replaceChildren();
    el.chart.replaceChildren();
    el.delivery.replaceChildren();
    el.ads.replaceChildren();
    el.rows.replaceChildren();
    el.deliverySection.hidden = true;
    el.adsSection.hidden = true;
    el.rowsSection.hidden = true;
    tables = { rows: null, ads: null };
  }

  function renderTotals(metrics, totals) {
    el.totals.replaceChildren(
      ...metrics.map((m) => {
        const v = totals ? totals[m.key] : undefined;
        return node("div", {
          class: `figure${m.key.startsWith("invalid") ? " minor" : ""}${m.money ? " money" : ""}`,
          "data-metric": m.key,
          "data-label": m.label,
          "data-value": typeof v === "number" ? v : m.money && v && typeof v === "object" ? JSON.stringify(v) : "",
          title: m.hint,
        }, fmtMetric(m, v));
      }),
    );
  }

  // A table of `columns` ({key, label, metric?}) over `rows`, kept for the CSV download.
  function renderTable(table, columns, rows, empty) {
    const head = node("thead", null, node("tr", null, ...columns.map((c) => node("th", { scope: "col", class: c.metric ? "num" : null, title: c.metric ? c.metric.hint : null }, c.label))));
    const body = node("tbody");
    for (const row of rows) {
      body.append(node("tr", null, ...columns.map((c) => {
        const v = row[c.key];
        return c.metric ? node("td", { class: "num" }, fmtMetric(c.metric, v)) : node("td", null, v === null || v === undefined ? "" : String(v));
      })));
    }
    if (!rows.length) body.append(node("tr", null, node("td", { colspan: columns.length, class: "empty" }, empty)));
    table.replaceChildren(head, body);
    return { columns, rows };
  }

  function renderDelivery(d) {
    const t = d.today || {};
    const l = d.lifetime || {};
    const cap = (v) => (v === null || v === undefined ? "no cap" : fmtCount(v));
    const left = (v) => (v === null || v === undefined ? "—" : fmtCount(v));
    const pace = typeof t.pace === "number" ? `${decimal.format(t.pace)}×` : "—";
    const item = (field, label, value) => node("div", { class: "item" }, node("dt", null, label), node("dd", { "data-field": field }, value));
    const asOf = d.as_of ? new Date(d.as_of) : null;
    el.delivery.replaceChildren(
      node("p", { class: `badge ${d.stop ? "stop" : "go"}`, "data-field": "stop" }, d.stop ? "Stop: a cap is reached" : "Serving: under its caps"),
      node("dl", null,
        item("today.day", t.tz ? `Today (${t.tz})` : "Today", t.day ? String(t.day) : "—"),
        item("today.billable_impressions", "Billable today", fmtCount(t.billable_impressions)),
        item("today.daily_cap", "Daily cap", cap(t.daily_cap)),
        item("today.remaining", "Left today", left(t.remaining)),
        item("today.pace", "Pace", pace),
        item("lifetime.billable_impressions", "Billable, lifetime", fmtCount(l.billable_impressions)),
        item("lifetime.total_cap", "Total cap", cap(l.total_cap)),
        item("lifetime.remaining", "Left in total", left(l.remaining)),
      ),
      node("p", { class: "note" },
        asOf && !Number.isNaN(asOf.getTime()) ? `As of ${asOf.toLocaleString()}` : "",
        d.complete === false ? " · incomplete: a server process is silent, counts may be missing" : ""),
    );
    el.deliverySection.hidden = false;
  }

  // ---------------------------------------------------------------- charts

  // Round tick values (0 and 4-ish steps) covering `max`.
  function ticks(max, ratio) {
    if (!(max > 0)) return ratio ? [0, 0.005, 0.01] : [0, 1];
    const raw = max / 4;
    const mag = 10 ** Math.floor(Math.log10(raw));
    let step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw);
    if (!ratio) step = Math.max(1, Math.ceil(step));
    const out = [];
    for (let v = 0; v < max + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
    if (out[out.length - 1] < max) out.push(Number((out[out.length - 1] + step).toPrecision(12)));
    return out;
  }

  // An SVG chart of one metric over the rows: bars up to 45 points, a line beyond.
  function drawChart(title, points, metric) {
    const W = 480, H = 210, L = 46, R = 10, T = 10, B = 28;
    const pw = W - L - R, ph = H - T - B;
    const n = points.length;
    const values = points.map((p) => (typeof p.value === "number" && Number.isFinite(p.value) ? p.value : 0));
    const ys = ticks(Math.max(0, ...values), metric.ratio);
    const top = ys[ys.length - 1];
    const y = (v) => T + ph - (v / top) * ph;
    const bars = n <= 45;
    const band = pw / Math.max(n, 1);
    const x = (i) => (bars ? L + band * (i + 0.5) : L + (n === 1 ? pw / 2 : (i * pw) / (n - 1)));
    const yFmt = metric.ratio ? (v) => percentTick.format(Number(v.toPrecision(3))) : (v) => (v >= 10000 ? compact.format(v) : integer.format(v));

    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": `${title}: chart` });
    root.append(svg("title", {}, title));
    const grid = svg("g", { class: "grid" });
    for (const v of ys) {
      grid.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      grid.append(svg("text", { x: L - 6, y: y(v), class: "ytick" }, yFmt(v)));
    }
    root.append(grid);

    const labels = svg("g", { class: "xlabels" });
    const hourly = n > 0 && points[0].label.includes("T");
    // Hourly labels fall on midnights when there are several days; otherwise about six labels.
    const every = hourly && n > 48 ? 24 * Math.ceil(n / 24 / 5) : Math.max(1, Math.ceil(n / (hourly ? 4 : 6)));
    let previous = null;
    for (let i = 0; i < n; i += every) {
      labels.append(svg("text", { x: x(i), y: H - B + 16 }, axisLabel(points[i].label, previous)));
      previous = points[i].label;
    }
    root.append(labels);
    root.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: T + ph, y2: T + ph }));

    const plot = svg("g", { class: "series" });
    if (bars) {
      values.forEach((v, i) => {
        const w = Math.max(1, band * 0.7);
        plot.append(svg("rect", { class: "bar", x: x(i) - w / 2, y: y(v), width: w, height: Math.max(0, T + ph - y(v)) }));
      });
    } else {
      const d = values.map((v, i) => `${i ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join("");
      plot.append(svg("path", { class: "area", d: `${d}L${x(n - 1).toFixed(1)},${T + ph}L${x(0).toFixed(1)},${T + ph}Z` }));
      plot.append(svg("path", { class: "line", d }));
      if (n <= 120) values.forEach((v, i) => plot.append(svg("circle", { class: "dot", cx: x(i), cy: y(v), r: 2.5 })));
    }
    root.append(plot);

    // One transparent column per point carries its tooltip.
    const hits = svg("g", { class: "hits" });
    const step = bars ? band : n > 1 ? pw / (n - 1) : pw;
    points.forEach((p, i) => {
      const left = bars ? L + band * i : Math.max(L, x(i) - step / 2);
      const right = bars ? left + band : Math.min(W - R, x(i) + step / 2);
      const hit = svg("rect", { x: left, y: T, width: Math.max(0.5, right - left), height: ph });
      hit.append(svg("title", {}, `${p.label}: ${fmtMetric(metric, p.value)} ${metric.label.toLowerCase()}`));
      hits.append(hit);
    });
    root.append(hits);
    return node("figure", { class: "chart-box", "data-metric": metric.key }, node("figcaption", null, title), root);
  }

  function renderCharts(metrics, rows, labelOf, per) {
    const points = (key) => rows.map((r) => ({ label: labelOf(r), value: r[key] }));
    el.chart.replaceChildren(...metrics.map((m) => drawChart(`${m.label} per ${per}`, points(m.key), m)));
  }

  // ---------------------------------------------------------------- queries

  function readRange() {
    const from = el.from.value.trim();
    const to = el.to.value.trim();
    const tz = el.tz.value.trim() || "UTC";
    if (!DAY.test(from) || !DAY.test(to)) return { problem: "Dates are YYYY-MM-DD (e.g. 2026-11-01).", field: !DAY.test(from) ? el.from : el.to };
    if (from > to) return { problem: "“From” is after “to”.", field: el.from };
    return { from, to, tz };
  }

  function refuse(problem, field) {
    setStatus(problem, "error");
    for (const input of document.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
    if (field) {
      field.setAttribute("aria-invalid", "true");
      field.focus();
    }
  }

  function updated(extra) {
    setStatus(`Updated ${new Date().toLocaleTimeString()}${extra ? ` · ${extra}` : ""}`, "ok");
    for (const input of document.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
  }

  async function runCampaign(range, signal) {
    const advertiser = el.advertiser.value.trim();
    const campaign = el.campaign.value.trim();
    if (!advertiser) return refuse("Type an advertiser id (a UUID).", el.advertiser);
    if (!campaign) return refuse("Pick or type a campaign id (a UUID).", el.campaign);
    const groupBy = el.groupBy.value === "hour" ? "hour" : "day";
    const base = `/v1/advertisers/${encodeURIComponent(advertiser)}/campaigns/${encodeURIComponent(campaign)}`;
    const params = (group) => new URLSearchParams({ from: range.from, to: range.to, tz: range.tz, group_by: group });
    const context = "this campaign";
    setStatus("Loading…", "loading");
    const [summary, byAd, delivery] = await Promise.allSettled([
      api(`${base}/summary`, params(groupBy), context, signal),
      api(`${base}/summary`, params("ad"), context, signal),
      api(`${base}/delivery`, null, "this campaign's delivery", signal),
    ]);
    if (signal.aborted) return;
    clearResults();
    if (summary.status === "fulfilled") {
      const s = summary.value;
      const rows = Array.isArray(s.rows) ? s.rows : [];
      const labelKey = groupBy;
      renderTotals(CAMPAIGN_METRICS, s.totals);
      renderCharts(CAMPAIGN_METRICS.slice(0, 4), rows, (r) => String(r[labelKey] ?? ""), groupBy);
      el.rowsTitle.textContent = `By ${groupBy}`;
      tables.rows = renderTable(el.rows, [{ key: labelKey, label: groupBy === "hour" ? "Hour" : "Day" }].concat(CAMPAIGN_METRICS.map((m) => ({ key: m.key, label: m.label, metric: m }))), rows, "No rows.");
      tables.rows.file = fileName("campaign", campaign, range, groupBy === "hour" ? "hourly" : "daily");
      el.rowsSection.hidden = false;
    }
    if (byAd.status === "fulfilled") {
      const rows = Array.isArray(byAd.value.rows) ? byAd.value.rows : [];
      tables.ads = renderTable(el.ads, [{ key: "ad_id", label: "Ad id" }].concat(CAMPAIGN_METRICS.map((m) => ({ key: m.key, label: m.label, metric: m }))), rows, "No ad had an impression or a click in this range.");
      tables.ads.file = fileName("campaign", campaign, range, "by-ad");
      el.adsSection.hidden = false;
    }
    if (delivery.status === "fulfilled") renderDelivery(delivery.value);
    const failed = [summary, byAd, delivery].find((r) => r.status === "rejected");
    if (failed) return showError(failed.reason);
    const s = summary.value;
    updated(`${s.rows ? s.rows.length : 0} ${groupBy}s · ${fmtCount(s.sealed_days)} sealed day(s) · zone ${s.tz || range.tz}`);
  }

  async function runSite(range, signal) {
    const site = el.site.value.trim();
    if (!site) return refuse("Pick or type a site id.", el.site);
    const scope = `${site}|${range.from}|${range.to}|${range.tz}`;
    // Another site: its filters start from "any"; another range of the same site keeps them.
    if (featuresFor !== null && !featuresFor.startsWith(`${site}|`)) clearFeatures();
    const filter = chosenFilter();
    const params = new URLSearchParams({ from: range.from, to: range.to, tz: range.tz, granularity: "day" });
    for (const [name, value] of filter) params.append(`feature.${name}`, value);
    const base = `/v1/sites/${encodeURIComponent(site)}`;
    setStatus("Loading…", "loading");
    const [uniques, features] = await Promise.allSettled([
      api(`${base}/uniques`, params, "this site", signal),
      featuresFor === scope
        ? Promise.resolve(null)
        : api(`${base}/features`, new URLSearchParams({ from: range.from, to: range.to, tz: range.tz }), "this site's features", signal),
    ]);
    if (signal.aborted) return;
    clearResults();
    if (features.status === "fulfilled" && features.value) {
      renderFeatures(features.value.features, filter);
      featuresFor = scope;
    }
    if (uniques.status === "fulfilled") {
      const u = uniques.value;
      const rows = Array.isArray(u.rows) ? u.rows : [];
      renderTotals(SITE_METRICS, u.total);
      renderCharts(SITE_METRICS.slice(0, 2), rows, (r) => String(r.period ?? ""), "day");
      el.rowsTitle.textContent = "By day";
      tables.rows = renderTable(el.rows, [{ key: "period", label: "Day" }].concat(SITE_METRICS.map((m) => ({ key: m.key, label: m.label, metric: m }))), rows, "No rows.");
      tables.rows.file = fileName("site", site, range, "daily");
      el.rowsSection.hidden = false;
    }
    const failed = [uniques, features].find((r) => r.status === "rejected");
    if (failed) return showError(failed.reason);
    const u = uniques.value;
    const shown = filter.map(([n, v]) => `${n} = ${v}`).join(", ");
    updated(`${u.rows ? u.rows.length : 0} days · ${fmtCount(u.sealed_days)} sealed day(s) · zone ${u.tz || range.tz}${shown ? ` · filter: ${shown}` : ""}`);
  }

  async function run() {
    // A key pasted but not yet saved with "Use key" is taken as it is.
    const typed = typedKey();
    if (typed && !KEY_CHARS.test(typed)) return refuse("A key is letters, digits and punctuation only (like adk_…): check what was pasted.", el.key);
    if (typed && typed !== currentKey()) {
      try {
        sessionStorage.setItem(KEY_STORE, typed);
        el.key.value = typed;
        el.keyInfo.textContent = "Key kept in this tab only.";
      } catch (_) {
        /* refused below */
      }
    }
    if (!currentKey()) return refuse("Paste an API key and press “Use key” first.", el.key);
    const range = readRange();
    if (range.problem) return refuse(range.problem, range.field);
    if (inflight) inflight.abort();
    const controller = new AbortController();
    inflight = controller;
    try {
      if (el.kind.value === "site") await runSite(range, controller.signal);
      else await runCampaign(range, controller.signal);
    } catch (e) {
      if (!controller.signal.aborted) showError(e);
    } finally {
      if (inflight === controller) inflight = null;
    }
  }

  el.query.addEventListener("submit", (event) => {
    event.preventDefault();
    run();
  });

  // ---------------------------------------------------------------- CSV

  // One RFC 4180 cell; a cell that a spreadsheet would read as a formula gets a leading quote.
  function csvCell(value) {
    let text = value === null || value === undefined ? "" : String(value);
    if (/^[=+\-@\t\r]/.test(text)) text = `'${text}`;
    return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
  }

  // The file name of a table: what, which range, which table; only A-Z a-z 0-9 . _ - in it.
  const fileName = (kind, id, range, table) =>
    `adevents-${kind}-${id}-${range.from}-${range.to}-${table}.csv`.replace(/[^A-Za-z0-9._-]+/g, "_");

  function downloadCsv(table) {
    if (!table) {
      setStatus("Nothing to download yet: press Show first.", "error");
      return;
    }
    const lines = [table.columns.map((c) => csvCell(c.key))];
    const cell = (c, v) => (c.metric && c.metric.money ? fmtMoney(v, "") : v);
    for (const row of table.rows) lines.push(table.columns.map((c) => csvCell(cell(c, row[c.key]))));
    const csv = `${lines.map((cells) => cells.join(",")).join("\r\n")}\r\n`;
    const name = table.file;
    const url = URL.createObjectURL(new Blob([csv], { type: "text/csv;charset=utf-8" }));
    const a = node("a", { href: url, download: name, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  el.csvAds.addEventListener("click", () => downloadCsv(tables.ads));
  el.csvRows.addEventListener("click", () => downloadCsv(tables.rows));

  // ---------------------------------------------------------------- start

  for (const button of document.querySelectorAll(".presets [data-days]")) {
    button.addEventListener("click", () => setRange(Number(button.dataset.days)));
  }

  el.tz.value = browserZone();
  try {
    const zones = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
    el.tzList.replaceChildren(...["UTC", ...zones.filter((z) => z !== "UTC")].map((z) => node("option", { value: z })));
  } catch (_) {
    /* free text only */
  }
  setRange(7);
  setKind("campaign");
  if (currentKey()) {
    el.key.value = currentKey();
    useKey();
  }
})();
