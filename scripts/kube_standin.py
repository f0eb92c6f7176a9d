#!/usr/bin/env python3
"""kube-standin: a stand-in for the Kubernetes API server, for tests of Kubernetes discovery.

This is NOT a Kubernetes API server. It implements only the subset of the Kubernetes API that
Dynamo 1.6.1's `--discovery-backend kubernetes` uses (through kube-rs 2.0.1), plus what
`kubectl` needs to look at it, over plain HTTP on 127.0.0.1, with no authentication,
no admission, no controllers and no persistence. Python 3 standard library only.

Resources (all namespaced; namespaces exist implicitly, there are no Namespace objects):
  discovery.k8s.io/v1   endpointslices          EndpointSlice
  nvidia.com/v1alpha1   dynamoworkermetadatas   DynamoWorkerMetadata (schema not checked)
  v1                    pods                    Pod (and pods/status, same object)

Per resource, under /api/v1/... or /apis/GROUP/VERSION/...:
  GET    .../namespaces/NS/PLURAL            list: labelSelector (k=v, k==v, k!=v, k, !k,
                                             k in (a,b), k notin (a,b)), fieldSelector
                                             (metadata.name, metadata.namespace), limit and
                                             continue (a consistent snapshot, kept for the
                                             last 100 paginated lists; an unknown token is
                                             410 Expired), metadata.resourceVersion and
                                             remainingItemCount; items of built-in kinds carry
                                             no apiVersion/kind, items of the custom resource
                                             do (as a real server writes them)
  GET    .../PLURAL                          the same across all namespaces
  GET    ...?watch=true|1                    watch: resourceVersion (absent or "0": ADDED for
                                             every current object first), timeoutSeconds
                                             (default 1800), allowWatchBookmarks (BOOKMARK
                                             every --bookmark-interval seconds and before the
                                             stream ends), sendInitialEvents=true (ADDED for
                                             every current object, then a BOOKMARK annotated
                                             k8s.io/initial-events-end). The answer is 200 with
                                             Transfer-Encoding: chunked, one JSON event a line,
                                             flushed per event. An object that starts or stops
                                             matching the label selector arrives as ADDED or
                                             DELETED. A resourceVersion older than the
                                             retained history (--history events, shared by all
                                             resources) is answered with an ERROR event
                                             holding a 410 Expired Status, then the stream
                                             ends, as a real server does.
  GET    .../namespaces/NS/PLURAL/NAME       one object
  POST   .../namespaces/NS/PLURAL            create: 201; 409 AlreadyExists; generateName
  PUT    .../namespaces/NS/PLURAL/NAME       replace: 404 if absent; 409 Conflict when the
                                             body's metadata.resourceVersion is stale
  PATCH  .../namespaces/NS/PLURAL/NAME       application/apply-patch+yaml (server-side apply;
                                             JSON bodies only; needs fieldManager; creates
                                             (201) or replaces the top-level fields and the
                                             labels, annotations and ownerReferences it names,
                                             keeping the rest (200); no field ownership, no
                                             conflicts); application/merge-patch+json (RFC 7386);
                                             application/json-patch+json (RFC 6902).
                                             Strategic merge patch is answered 415.
  DELETE .../namespaces/NS/PLURAL/NAME       the object is gone at once (no finalizers, no
                                             grace period). Pods and DynamoWorkerMetadatas
                                             answer with the deleted object, EndpointSlices
                                             with a Success Status, as a real server does.
                                             GARBAGE COLLECTION: unless propagationPolicy is
                                             Orphan, deleting any object also deletes, at once
                                             and recursively, every object in its namespace
                                             whose metadata.ownerReferences name its uid. So
                                             deleting a Pod deletes the DynamoWorkerMetadata
                                             that the pod's worker registered (its owner
                                             reference names the pod's uid). The stand-in runs
                                             no EndpointSlice controller: deleting a Pod does
                                             NOT touch the EndpointSlices that list it.
  .../NAME/status                            the same object (no status subresource split)

Every change stamps one global, monotonically increasing resourceVersion (a decimal string);
a change that leaves an object as it was (a no-op apply or patch) stamps nothing and sends
no event. Objects get metadata.uid (a client-supplied uid is kept on create: a real server
would assign its own), namespace, resourceVersion, creationTimestamp and generation
(incremented when anything outside metadata and status changes); managedFields are omitted.
Stored objects are written back as a real server writes them: empty labels, annotations,
ownerReferences and finalizers are left out, and an EndpointSlice's empty or absent
`endpoints` is `null`. A Pod keeps the status it was created with (a real server resets it;
here tests set container readiness themselves).
Errors are `kind: Status` objects: 400 BadRequest, 404 NotFound, 405 MethodNotAllowed,
409 AlreadyExists/Conflict, 410 Expired, 415 UnsupportedMediaType, 422 Invalid (names that
are not DNS-1123 subdomains, EndpointSlices without a valid addressType or with an endpoint
without addresses, Pods without containers having a name and an image).

Discovery for kubectl (legacy, not aggregated): GET /version, /api, /api/v1, /apis,
/apis/GROUP, /apis/GROUP/VERSION; /healthz, /livez, /readyz. List and get answer a
meta.k8s.io/v1 Table when the Accept header asks for one (as `kubectl get` does).

Stand-in controls (not Kubernetes API; for tests of re-watch and re-list):
  POST /_standin/close-watches   end every open watch stream now (no final bookmark)
  POST /_standin/compact         forget the event history: every watch from an older
                                 resourceVersion gets 410 Expired

Usage: python3 scripts/kube_standin.py --port N [--record FILE] [--kubeconfig-out FILE]
       [--history N] [--bookmark-interval SECONDS] [--verbose]
Prints `kube-standin: listening on 127.0.0.1:N` once it accepts connections (--port 0 picks a
free port), and stops on SIGTERM or SIGINT, ending open watches (with a BOOKMARK first where
the watch allows them). --kubeconfig-out FILE writes a kubeconfig for http://127.0.0.1:N with
one context and a user whose dummy token is `kube-standin-dummy-token`.

--record FILE appends one JSON line per exchange: seq (arrival order), t and t_end (seconds
since start), method, path (with query), the request's content_type, accept and user_agent,
its other headers but Host and Content-Length (other_headers), its authorization (the whole
header when the token is a dummy `kube-standin-...` one, so that per-process kubeconfigs with
tokens such as `kube-standin-worker-0` tell who sent what; else the scheme only), the request
body (parsed when JSON), the status and the response body; for a watch, `watch: true`, the
events sent (each with its time) and what ended it. A watch's line is written when the stream
ends, so lines are in order of completion: sort by seq for arrival order.
"""

import argparse
import base64
import copy
import datetime
import json
import random
import re
import signal
import sys
import threading
import time
import uuid
from collections import OrderedDict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0+kube-standin",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}


class Resource:
    def __init__(self, group, version, plural, singular, kind, verbs, short_names=(),
                 typed_list_items=False, subresources=()):
        self.group = group
        self.version = version
        self.plural = plural
        self.singular = singular
        self.kind = kind
        self.verbs = verbs
        self.short_names = list(short_names)
        self.typed_list_items = typed_list_items
        self.subresources = subresources

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self):
        return f"{self.plural}.{self.group}" if self.group else self.plural


VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
RESOURCES = [
    Resource("discovery.k8s.io", "v1", "endpointslices", "endpointslice", "EndpointSlice", VERBS),
    Resource("nvidia.com", "v1alpha1", "dynamoworkermetadatas", "dynamoworkermetadata",
             "DynamoWorkerMetadata", VERBS, typed_list_items=True),
    Resource("", "v1", "pods", "pod", "Pod", VERBS, short_names=["po"], subresources=("status",)),
]
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
# Objects whose DELETE answers with the deleted object rather than a Status (as in Kubernetes).
RETURNS_DELETED_OBJECT = {"Pod", "DynamoWorkerMetadata"}

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            s["details"] = self.details
        return s


def not_found(res, name):
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found',
                    {"name": name, "group": res.group, "kind": res.plural})


def invalid(res, name, causes):
    text = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    return ApiError(422, "Invalid", f'{res.kind}.{res.group or "core"} "{name}" is invalid: {text}',
                    {"name": name, "group": res.group, "kind": res.kind,
                     "causes": [{"reason": "FieldValueInvalid", **c} for c in causes]})


# ---------------------------------------------------------------------------------------------
# Selectors

SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
EQ_TERM = re.compile(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)\s*$")
EXISTS_TERM = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


def split_terms(selector):
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur)
    return terms


def parse_label_selector(selector):
    """A list of predicates over a labels dict; raises ApiError 400 when unparseable."""
    preds = []
    for term in split_terms(selector or ""):
        m = SET_TERM.match(term)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                preds.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                preds.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
            continue
        m = EQ_TERM.match(term)
        if m:
            key, op, value = m.groups()
            if op == "!=":
                preds.append(lambda labels, k=key, v=value: labels.get(k) != v)
            else:
                preds.append(lambda labels, k=key, v=value: labels.get(k) == v)
            continue
        m = EXISTS_TERM.match(term)
        if m:
            neg, key = m.groups()
            if neg:
                preds.append(lambda labels, k=key: k not in labels)
            else:
                preds.append(lambda labels, k=key: k in labels)
            continue
        raise ApiError(400, "BadRequest", f"unable to parse requirement: invalid label selector term {term!r}")
    return preds


def parse_field_selector(selector):
    preds = []
    for term in split_terms(selector or ""):
        m = EQ_TERM.match(term)
        if not m or m.group(1) not in ("metadata.name", "metadata.namespace"):
            raise ApiError(400, "BadRequest", f'"{term.strip()}" is not a known field selector: '
                                              "kube-standin supports metadata.name and metadata.namespace")
        field, op, value = m.groups()
        attr = field.split(".", 1)[1]
        if op == "!=":
            preds.append(lambda meta, a=attr, v=value: meta.get(a) != v)
        else:
            preds.append(lambda meta, a=attr, v=value: meta.get(a) == v)
    return preds


class Filter:
    def __init__(self, res, namespace, query):
        self.res = res
        self.namespace = namespace
        self.labels = parse_label_selector(query.get("labelSelector", ""))
        self.fields = parse_field_selector(query.get("fieldSelector", ""))

    def matches(self, res, namespace, obj):
        if res is not self.res or (self.namespace is not None and namespace != self.namespace):
            return False
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        return all(p(labels) for p in self.labels) and all(p(meta) for p in self.fields)


# ---------------------------------------------------------------------------------------------
# Store


class Event:
    __slots__ = ("rv", "res", "namespace", "type", "obj", "prev")

    def __init__(self, rv, res, namespace, type_, obj, prev):
        self.rv, self.res, self.namespace, self.type, self.obj, self.prev = rv, res, namespace, type_, obj, prev


class Store:
    def __init__(self, history, start_rv=1000):
        self.cond = threading.Condition()
        self.rv = start_rv
        self.objects = {}  # (resource, namespace, name) -> object (with apiVersion and kind)
        self.events = deque()
        self.history = history
        self.compacted = start_rv  # a watch from an rv below this one can no longer be served
        self.snapshots = OrderedDict()  # continue token id -> (rv, items)
        self.stopping = False
        self.watch_epoch = 0  # bumped by /_standin/close-watches
        self.open_watches = 0

    # Called with self.cond held.
    def _commit(self, res, namespace, name, obj, type_):
        self.rv += 1
        key = (res, namespace, name)
        prev = self.objects.get(key)
        if obj is None:
            obj = copy.deepcopy(prev)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            del self.objects[key]
        else:
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[key] = obj
        self.events.append(Event(self.rv, res, namespace, type_, copy.deepcopy(obj), copy.deepcopy(prev)))
        while len(self.events) > self.history:
            self.compacted = self.events.popleft().rv
        self.cond.notify_all()
        return obj

    def compact(self):
        with self.cond:
            self.events.clear()
            self.compacted = self.rv
            self.cond.notify_all()

    def close_watches(self):
        with self.cond:
            self.watch_epoch += 1
            self.cond.notify_all()

    def stop(self):
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    def get(self, res, namespace, name):
        with self.cond:
            obj = self.objects.get((res, namespace, name))
            if obj is None:
                raise not_found(res, name)
            return copy.deepcopy(obj)

    def list(self, flt, query):
        limit = int(query.get("limit") or 0)
        token = query.get("continue")
        with self.cond:
            if token:
                try:
                    decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                    snap_id, offset = decoded["id"], int(decoded["offset"])
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "continue key is not valid")
                if snap_id not in self.snapshots:
                    raise ApiError(410, "Expired", "The provided continue parameter is too old to display "
                                   "a consistent list result. You can start a new list without the "
                                   "continue parameter.")
                rv, items = self.snapshots[snap_id]
            else:
                rv = self.rv
                keys = sorted(k for k, o in self.objects.items() if flt.matches(k[0], k[1], o))
                items = [copy.deepcopy(self.objects[k]) for k in keys]
                offset, snap_id = 0, None
            page = items[offset:offset + limit] if limit > 0 else items[offset:]
            meta = {"resourceVersion": str(rv)}
            rest = len(items) - offset - len(page)
            if rest > 0:
                if snap_id is None:
                    snap_id = uuid.uuid4().hex
                    self.snapshots[snap_id] = (rv, items)
                    while len(self.snapshots) > 100:
                        self.snapshots.popitem(last=False)
                meta["continue"] = base64.urlsafe_b64encode(
                    dumps({"id": snap_id, "offset": offset + len(page)}).encode()).decode()
                meta["remainingItemCount"] = rest
        res = flt.res
        if not res.typed_list_items:
            for item in page:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        return {"kind": res.kind + "List", "apiVersion": res.api_version, "metadata": meta, "items": page}

    def create(self, res, namespace, obj):
        meta = obj.setdefault("metadata", {})
        with self.cond:
            if not meta.get("name") and meta.get("generateName"):
                while True:
                    name = meta["generateName"] + "".join(random.choice("bcdfghjklmnpqrstvwxz2456789")
                                                          for _ in range(5))
                    if (res, namespace, name) not in self.objects:
                        break
                meta["name"] = name
            name = meta.get("name") or ""
            validate(res, name, obj)
            if (res, namespace, name) in self.objects:
                raise ApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists',
                               {"name": name, "group": res.group, "kind": res.plural})
            meta["namespace"] = namespace
            if not isinstance(meta.get("uid"), str) or not meta["uid"]:
                meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            for k in ("resourceVersion", "deletionTimestamp", "managedFields", "selfLink"):
                meta.pop(k, None)
            return copy.deepcopy(self._commit(res, namespace, name, obj, "ADDED"))

    def update(self, res, namespace, name, mutate, create_ok=False):
        """mutate(current or None) -> the wanted object; returns (object, created)."""
        with self.cond:
            cur = self.objects.get((res, namespace, name))
            if cur is None and not create_ok:
                raise not_found(res, name)
            new = mutate(copy.deepcopy(cur) if cur is not None else None)
            meta = new.setdefault("metadata", {})
            if meta.get("name", name) != name:
                raise ApiError(400, "BadRequest",
                               f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
            meta["name"] = name
            meta["namespace"] = namespace
            for k in ("labels", "annotations", "ownerReferences", "finalizers"):
                if k in meta and not meta[k]:
                    del meta[k]  # empty is omitted, as a real server writes it
            validate(res, name, new)
            if cur is None:
                if not isinstance(meta.get("uid"), str) or not meta["uid"]:
                    meta["uid"] = str(uuid.uuid4())
                meta["creationTimestamp"] = now_rfc3339()
                meta["generation"] = 1
                meta.pop("resourceVersion", None)
                return copy.deepcopy(self._commit(res, namespace, name, new, "ADDED")), True
            want_rv = meta.get("resourceVersion")
            if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": '
                               "the object has been modified; please apply your changes to the latest "
                               "version and try again", {"name": name, "group": res.group, "kind": res.plural})
            cmeta = cur["metadata"]
            for k in ("uid", "creationTimestamp", "resourceVersion", "generation"):
                if k in cmeta:
                    meta[k] = cmeta[k]
                else:
                    meta.pop(k, None)
            if new == cur:
                return copy.deepcopy(cur), False
            if body_of(new) != body_of(cur):
                meta["generation"] = int(cmeta.get("generation") or 0) + 1
            return copy.deepcopy(self._commit(res, namespace, name, new, "MODIFIED")), False

    def delete(self, res, namespace, name, preconditions=None, propagation=None):
        with self.cond:
            cur = self.objects.get((res, namespace, name))
            if cur is None:
                raise not_found(res, name)
            pre = preconditions or {}
            for k in ("uid", "resourceVersion"):
                if pre.get(k) and pre[k] != cur["metadata"].get(k):
                    raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": '
                                   f"Precondition failed: {k} in precondition: {pre[k]}, "
                                   f"{k} in object meta: {cur['metadata'].get(k)}",
                                   {"name": name, "group": res.group, "kind": res.plural})
            gone = self._commit(res, namespace, name, None, "DELETED")
            if propagation != "Orphan":
                self._collect(namespace, cur["metadata"].get("uid"))
            return copy.deepcopy(gone)

    def _collect(self, namespace, owner_uid):
        """The garbage collector's effect, at once: dependents of a deleted owner go too."""
        if not owner_uid:
            return
        for (res, ns, name), obj in sorted(self.objects.items(), key=lambda kv: (kv[0][0].plural, kv[0][1], kv[0][2])):
            if ns != namespace or (res, ns, name) not in self.objects:
                continue
            refs = (obj.get("metadata") or {}).get("ownerReferences") or []
            if any(isinstance(r, dict) and r.get("uid") == owner_uid for r in refs):
                uid = obj["metadata"].get("uid")
                self._commit(res, ns, name, None, "DELETED")
                self._collect(namespace, uid)


def body_of(obj):
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def validate(res, name, obj):
    causes = []
    if not name:
        causes.append({"field": "metadata.name", "message": "Required value: name or generateName is required"})
    elif len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        causes.append({"field": "metadata.name", "message": f'Invalid value: "{name}": a lowercase RFC 1123 '
                       "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
                       "start and end with an alphanumeric character"})
    if obj.get("apiVersion") not in (None, res.api_version) or obj.get("kind") not in (None, res.kind):
        raise ApiError(400, "BadRequest", f"the API version in the data ({obj.get('apiVersion')}) or the kind "
                       f"({obj.get('kind')}) does not match the expected {res.api_version} {res.kind}")
    rest = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    obj.clear()
    obj.update({"apiVersion": res.api_version, "kind": res.kind, **rest})
    if not isinstance(obj.get("metadata"), dict):
        causes.append({"field": "metadata", "message": "Required value"})
    if res.kind == "EndpointSlice":
        if obj.get("addressType") not in ("IPv4", "IPv6", "FQDN"):
            causes.append({"field": "addressType", "message": f"Unsupported value: {obj.get('addressType')!r}: "
                           'supported values: "FQDN", "IPv4", "IPv6"'})
        eps = obj.get("endpoints")
        if eps is not None and not isinstance(eps, list):
            causes.append({"field": "endpoints", "message": "Invalid value: must be a list"})
        for i, ep in enumerate(eps if isinstance(eps, list) else []):
            addrs = ep.get("addresses") if isinstance(ep, dict) else None
            if not isinstance(addrs, list) or not addrs or not all(isinstance(a, str) for a in addrs):
                causes.append({"field": f"endpoints[{i}].addresses",
                               "message": "Required value: must contain at least 1 address"})
    elif res.kind == "Pod":
        containers = (obj.get("spec") or {}).get("containers")
        if not isinstance(containers, list) or not containers:
            causes.append({"field": "spec.containers", "message": "Required value"})
        for i, c in enumerate(containers if isinstance(containers, list) else []):
            for f in ("name", "image"):
                if not isinstance(c, dict) or not c.get(f):
                    causes.append({"field": f"spec.containers[{i}].{f}", "message": "Required value"})
    if causes:
        raise invalid(res, name, causes)
    if res.kind == "EndpointSlice" and not obj.get("endpoints"):
        obj["endpoints"] = None  # a real server writes an empty or absent list as null


# ---------------------------------------------------------------------------------------------
# Patches


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise ValueError("a JSON patch is a list of operations")
    doc = copy.deepcopy(doc)

    def walk(parts):
        cur = doc
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        return cur, parts[-1]

    def get(path):
        cur = doc
        for p in pointer(path):
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        return cur

    def add(path, value):
        parent, last = walk(pointer(path))
        if isinstance(parent, list):
            parent.insert(len(parent) if last == "-" else int(last), value)
        else:
            parent[last] = value

    def remove(path):
        parent, last = walk(pointer(path))
        return parent.pop(int(last)) if isinstance(parent, list) else parent.pop(last)

    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        try:
            if kind == "add":
                add(path, copy.deepcopy(op["value"]))
            elif kind == "remove":
                remove(path)
            elif kind == "replace":
                remove(path)
                add(path, copy.deepcopy(op["value"]))
            elif kind == "move":
                add(path, remove(op["from"]))
            elif kind == "copy":
                add(path, copy.deepcopy(get(op["from"])))
            elif kind == "test":
                if get(path) != op.get("value"):
                    raise ValueError(f"testing value {path} failed")
            else:
                raise ValueError(f"unknown operation {kind!r}")
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError(f"{kind} {path}: {e!r}")
    return doc


# ---------------------------------------------------------------------------------------------
# Recording


class Recorder:
    def __init__(self, path):
        self.lock = threading.Lock()
        self.file = open(path, "a", encoding="utf-8") if path else None
        self.start = time.monotonic()
        self.seq = 0

    def now(self):
        return round(time.monotonic() - self.start, 3)

    def next_seq(self):
        with self.lock:
            self.seq += 1
            return self.seq

    def write(self, entry):
        if self.file is None:
            return
        with self.lock:
            self.file.write(dumps(entry) + "\n")
            self.file.flush()

    def close(self):
        if self.file is not None:
            with self.lock:
                self.file.close()
                self.file = None


# ---------------------------------------------------------------------------------------------
# Discovery documents


def group_versions():
    groups = OrderedDict()
    for r in RESOURCES:
        if r.group:
            groups.setdefault(r.group, [])
            if r.version not in groups[r.group]:
                groups[r.group].append(r.version)
    return groups


def api_group(name, versions):
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def resource_list(group, version):
    resources = []
    for r in RESOURCES:
        if r.group == group and r.version == version:
            resources.append({"name": r.plural, "singularName": r.singular, "namespaced": True,
                              "kind": r.kind, "verbs": r.verbs,
                              **({"shortNames": r.short_names} if r.short_names else {})})
            for sub in r.subresources:
                resources.append({"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": True,
                                  "kind": r.kind, "verbs": ["get", "patch", "update"]})
    if not resources:
        return None
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def age(ts):
    try:
        t = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return "<unknown>"
    s = int((datetime.datetime.now(datetime.timezone.utc) - t).total_seconds())
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h"


def table(res, objects, meta):
    cols = [("Name", "string", "name")]
    if res.kind == "EndpointSlice":
        cols += [("AddressType", "string", ""), ("Ports", "string", ""), ("Endpoints", "string", "")]
    elif res.kind == "Pod":
        cols += [("Ready", "string", ""), ("Status", "string", "")]
    cols.append(("Age", "string", ""))
    rows = []
    for o in objects:
        m = o.get("metadata") or {}
        cells = [m.get("name")]
        if res.kind == "EndpointSlice":
            ports = ",".join(str(p.get("port")) for p in (o.get("ports") or []) if isinstance(p, dict)) or "<unset>"
            addrs = [a for ep in (o.get("endpoints") or []) for a in (ep.get("addresses") or [])]
            cells += [o.get("addressType"), ports, ",".join(addrs) or "<unset>"]
        elif res.kind == "Pod":
            st = (o.get("status") or {}).get("containerStatuses") or []
            n = len((o.get("spec") or {}).get("containers") or [])
            cells += [f"{sum(1 for c in st if c.get('ready'))}/{n}", (o.get("status") or {}).get("phase", "Unknown")]
        cells.append(age(m.get("creationTimestamp")))
        rows.append({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                "metadata": m}})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "columnDefinitions": [{"name": n, "type": t, "format": f, "description": n, "priority": 0}
                                  for n, t, f in cols],
            "rows": rows}


# ---------------------------------------------------------------------------------------------
# HTTP


def route(path):
    """(resource, namespace or None, name or None, subresource or None), or None."""
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    res = BY_PATH.get((group, version, rest[0]))
    if res is None:
        return None
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else None
    if sub is not None and sub not in res.subresources:
        return None
    return res, namespace, name, sub


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-standin"
    sys_version = ""

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("kube-standin: " + (fmt % args) + "\n")

    def do_GET(self):
        self.dispatch()

    def do_POST(self):
        self.dispatch()

    def do_PUT(self):
        self.dispatch()

    def do_PATCH(self):
        self.dispatch()

    def do_DELETE(self):
        self.dispatch()

    # -- plumbing

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def send_json(self, code, obj):
        data = (dumps(obj) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Length", str(len(data)))
        if self.server.store.stopping:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        return obj

    def dispatch(self):
        rec = self.server.recorder
        seq, t0 = rec.next_seq(), rec.now()
        entry = {"seq": seq, "t": t0, "method": self.command, "path": self.path,
                 "content_type": self.headers.get("Content-Type"), "accept": self.headers.get("Accept"),
                 "user_agent": self.headers.get("User-Agent")}
        others = {k.lower(): v for k, v in self.headers.items()
                  if k.lower() not in ("content-type", "accept", "user-agent", "authorization", "host",
                                       "content-length")}
        if others:
            entry["other_headers"] = others
        auth = self.headers.get("Authorization")
        if auth:
            # The dummy tokens of --kubeconfig-out (kube-standin-...) name the client; others are
            # not written down.
            scheme, _, token = auth.partition(" ")
            entry["authorization"] = auth if token.startswith("kube-standin-") else scheme + " …"
        try:
            raw = self.read_body()
        except (ValueError, OSError):
            self.close_connection = True
            return
        body = None
        if raw:
            try:
                body = json.loads(raw)
                entry["body"] = body
            except ValueError:
                entry["body_text"] = raw.decode("utf-8", "replace")
        try:
            status, response = self.handle_api(body, raw, entry)
        except ApiError as e:
            status, response = e.code, self.send_json(e.code, e.status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        if status is None:  # a watch: it wrote its own record
            return
        entry.update({"status": status, "response": response, "t_end": rec.now()})
        rec.write(entry)

    # -- the API

    def handle_api(self, body, raw, entry):
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path.rstrip("/") or "/"
        store = self.server.store
        if path.startswith("/_standin/") and self.command == "POST":
            if path == "/_standin/close-watches":
                store.close_watches()
                return 200, self.send_json(200, {"closed": True})
            if path == "/_standin/compact":
                store.compact()
                return 200, self.send_json(200, {"compactedAt": str(store.rv)})
        if self.command == "GET":
            doc = self.discovery(path)
            if doc is not None:
                return 200, self.send_json(200, doc)
            if path in ("/healthz", "/livez", "/readyz"):
                data = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return 200, "ok"
        r = route(path)
        if r is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource",
                           {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]})
        res, namespace, name, _sub = r
        method = self.command
        if name is None:
            if method == "GET":
                flt = Filter(res, namespace, query)
                if query.get("watch") in ("true", "1"):
                    self.watch(flt, query, entry)
                    return None, None
                lst = store.list(flt, query)
                if self.wants_table():
                    return 200, self.send_json(200, table(res, lst["items"], lst["metadata"]))
                return 200, self.send_json(200, lst)
            if method == "POST" and namespace is not None:
                obj = self.object_body(res, body, raw)
                meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
                if meta.get("namespace") not in (None, "", namespace):
                    raise ApiError(400, "BadRequest", "the namespace of the provided object does not match "
                                   "the namespace sent on the request")
                return 201, self.send_json(201, store.create(res, namespace, obj))
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource")
        if namespace is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if method == "GET":
            obj = store.get(res, namespace, name)
            if self.wants_table():
                return 200, self.send_json(200, table(res, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]}))
            return 200, self.send_json(200, obj)
        if method == "PUT":
            obj = self.object_body(res, body, raw)
            new, _ = store.update(res, namespace, name, lambda cur: obj)
            return 200, self.send_json(200, new)
        if method == "PATCH":
            return self.patch(res, namespace, name, body, raw, query)
        if method == "DELETE":
            opts = body if isinstance(body, dict) else {}
            gone = store.delete(res, namespace, name, opts.get("preconditions"),
                                query.get("propagationPolicy") or opts.get("propagationPolicy"))
            if res.kind in RETURNS_DELETED_OBJECT:
                return 200, self.send_json(200, gone)
            return 200, self.send_json(200, {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": res.group, "kind": res.plural,
                            "uid": gone["metadata"].get("uid")}})
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def wants_table(self):
        return "as=Table" in (self.headers.get("Accept") or "")

    def object_body(self, res, body, raw):
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request must be a JSON object"
                           + (" (kube-standin reads JSON only, not YAML)" if raw else ""))
        return copy.deepcopy(body)

    def discovery(self, path):
        port = self.server.server_address[1]
        if path == "/version":
            return SERVER_VERSION
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}]}
        if path == "/apis":
            return {"kind": "APIGroupList", "apiVersion": "v1",
                    "groups": [api_group(g, vs) for g, vs in group_versions().items()]}
        if path == "/api/v1":
            return resource_list("", "v1")
        parts = path.strip("/").split("/")
        if parts[0] == "apis" and len(parts) == 2 and parts[1] in group_versions():
            return {"kind": "APIGroup", "apiVersion": "v1", **api_group(parts[1], group_versions()[parts[1]])}
        if parts[0] == "apis" and len(parts) == 3:
            return resource_list(parts[1], parts[2])
        return None

    def patch(self, res, namespace, name, body, raw, query):
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        store = self.server.store
        if ctype == "application/apply-patch+yaml":
            if not query.get("fieldManager"):
                raise ApiError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                               "Required value: is required for apply patch")
            applied = self.object_body(res, body, raw)
            meta = applied.get("metadata")
            if not isinstance(meta, dict) or meta.get("name") not in (None, name):
                raise ApiError(400, "BadRequest", f"the name of the object ({(meta or {}).get('name')}) does "
                               f"not match the name on the URL ({name})")
            if applied.get("apiVersion") != res.api_version or applied.get("kind") != res.kind:
                raise ApiError(400, "BadRequest", f"apiVersion and kind are required for apply and must be "
                               f"{res.api_version} {res.kind}")

            def apply(cur):
                new = copy.deepcopy(applied)
                if cur is not None:
                    # Fields set by others and not named by this apply (status, other labels) stay.
                    new = merge_patch(cur, strip_nulls(applied))
                    for key in ("labels", "annotations", "ownerReferences", "finalizers"):
                        if key in applied["metadata"]:
                            new["metadata"][key] = copy.deepcopy(applied["metadata"][key])
                    for key in applied:
                        if key not in ("metadata", "apiVersion", "kind"):
                            new[key] = copy.deepcopy(applied[key])
                new["metadata"].pop("resourceVersion", None)
                return new

            obj, created = store.update(res, namespace, name, apply, create_ok=True)
            code = 201 if created else 200
            return code, self.send_json(code, obj)
        if ctype in ("application/merge-patch+json", "application/json-patch+json"):
            if body is None:
                raise ApiError(400, "BadRequest", "the body of the request was in an unknown format - "
                               "accepted media types include: application/json-patch+json, "
                               "application/merge-patch+json, application/apply-patch+yaml")

            def change(cur):
                try:
                    if ctype == "application/merge-patch+json":
                        new = merge_patch(cur, body)
                    else:
                        new = json_patch(cur, body)
                except ValueError as e:
                    raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                                   f"request: {e}")
                if not isinstance(new, dict):
                    raise ApiError(422, "Invalid", "the patch does not leave an object")
                meta = new.setdefault("metadata", {})
                # A patch that does not name a resourceVersion is not a precondition.
                if not ((body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None):
                    meta.pop("resourceVersion", None)
                meta.setdefault("name", name)
                return new

            obj, _ = store.update(res, namespace, name, change)
            return 200, self.send_json(200, obj)
        raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                       f"accepted media types include: application/json-patch+json, application/merge-patch+json, "
                       f"application/apply-patch+yaml (kube-standin does not do {ctype or 'this media type'})")

    # -- watch

    def watch(self, flt, query, entry):
        store, rec = self.server.store, self.server.recorder
        entry["watch"] = True
        events_sent = []
        entry["events"] = events_sent
        res = flt.res
        timeout = float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        interval = self.server.bookmark_interval
        rv_param = query.get("resourceVersion") or ""
        initial = query.get("sendInitialEvents") in ("true", "1")
        deadline = time.monotonic() + timeout
        if rv_param and not rv_param.isdigit():
            raise ApiError(400, "BadRequest", f'resourceVersion: Invalid value: "{rv_param}": must be a number')

        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

        def send(type_, obj):
            line = (dumps({"type": type_, "object": obj}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
            events_sent.append({"t": rec.now(), "type": type_, "object": obj})

        def bookmark(rv, annotations=None):
            meta = {"resourceVersion": str(rv)}
            if annotations:
                meta["annotations"] = annotations
            send("BOOKMARK", {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta})

        ended_by = "timeout"
        with store.cond:
            store.open_watches += 1
            epoch = store.watch_epoch
            pending = []
            if rv_param in ("", "0") or initial:
                cursor = store.rv
                pending = [("ADDED", copy.deepcopy(o)) for k, o in sorted(store.objects.items(),
                                                                           key=lambda kv: kv[0][1:])
                           if flt.matches(k[0], k[1], o)]
            else:
                cursor = int(rv_param)
        try:
            for type_, obj in pending:
                send(type_, obj)
            if initial and bookmarks:
                bookmark(cursor, {"k8s.io/initial-events-end": "true"})
            next_bookmark = time.monotonic() + interval
            while True:
                out, expired = [], None
                with store.cond:
                    while True:
                        if store.stopping:
                            ended_by = "server stopping"
                            break
                        if store.watch_epoch != epoch:
                            ended_by = "closed by /_standin/close-watches"
                            break
                        if cursor < store.compacted:
                            expired = store.compacted
                            break
                        if store.events and store.events[-1].rv > cursor:
                            break
                        now = time.monotonic()
                        if now >= deadline or (bookmarks and now >= next_bookmark):
                            break
                        store.cond.wait(min(deadline, next_bookmark if bookmarks else deadline) - now)
                    if expired is None:
                        for ev in store.events:
                            if ev.rv <= cursor:
                                continue
                            now_in = flt.matches(ev.res, ev.namespace, ev.obj) and ev.type != "DELETED"
                            was_in = ev.prev is not None and flt.matches(ev.res, ev.namespace, ev.prev)
                            if ev.type == "DELETED":
                                if flt.matches(ev.res, ev.namespace, ev.obj):
                                    out.append(("DELETED", copy.deepcopy(ev.obj)))
                            elif now_in and was_in:
                                out.append(("MODIFIED", copy.deepcopy(ev.obj)))
                            elif now_in:
                                out.append(("ADDED", copy.deepcopy(ev.obj)))
                            elif was_in:
                                gone = copy.deepcopy(ev.prev)
                                gone["metadata"]["resourceVersion"] = str(ev.rv)
                                out.append(("DELETED", gone))
                            cursor = ev.rv
                        cursor = max(cursor, store.events[-1].rv if store.events else cursor)
                    stopping, closed = store.stopping, store.watch_epoch != epoch
                for type_, obj in out:
                    send(type_, obj)
                if expired is not None:
                    send("ERROR", {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                   "message": f"too old resource version: {cursor} ({expired})",
                                   "reason": "Expired", "code": 410})
                    ended_by = "410 Expired"
                    break
                if closed:
                    break
                now = time.monotonic()
                if stopping or now >= deadline:
                    if bookmarks:
                        bookmark(cursor)
                    if stopping:
                        ended_by = "server stopping"
                        self.close_connection = True
                    break
                if bookmarks and now >= next_bookmark:
                    bookmark(cursor)
                    next_bookmark = now + interval
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            ended_by = "client closed"
            self.close_connection = True
        finally:
            with store.cond:
                store.open_watches -= 1
                store.cond.notify_all()
            entry.update({"status": 200, "ended_by": ended_by, "t_end": rec.now()})
            rec.write(entry)


def strip_nulls(obj):
    if isinstance(obj, dict):
        return {k: strip_nulls(v) for k, v in obj.items() if v is not None}
    return obj


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def finish_request(self, request, client_address):
        # On the https listener: the TLS handshake, in this connection's own thread.
        if hasattr(request, "do_handshake"):
            try:
                request.settimeout(10)
                request.do_handshake()
                request.settimeout(None)
            except OSError:
                return
        super().finish_request(request, client_address)


def write_kubeconfig(path, port):
    text = f"""apiVersion: v1
kind: Config
clusters:
- name: kube-standin
  cluster:
    server: http://127.0.0.1:{port}
contexts:
- name: kube-standin
  context:
    cluster: kube-standin
    user: kube-standin
    namespace: default
current-context: kube-standin
preferences: {{}}
users:
- name: kube-standin
  user:
    token: kube-standin-dummy-token
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description="A stand-in for the subset of the Kubernetes API that Dynamo "
                                             "1.6.1's Kubernetes discovery uses (not a Kubernetes API server).")
    ap.add_argument("--port", type=int, required=True, help="port on 127.0.0.1 (0: any free port)")
    ap.add_argument("--record", help="append every exchange to this file as one JSON line")
    ap.add_argument("--kubeconfig-out", help="write a kubeconfig for this server to this file")
    ap.add_argument("--history", type=int, default=10000,
                    help="events retained for watches from an older resourceVersion (default 10000)")
    ap.add_argument("--bookmark-interval", type=float, default=30.0,
                    help="seconds between BOOKMARK events on watches that allow them (default 30)")
    ap.add_argument("--verbose", action="store_true", help="log every request on stderr")
    ap.add_argument("--tls-port", type=int,
                    help="also serve the same objects over https on this port of 127.0.0.1 (as a cluster's API "
                         "server is reached); needs --tls-cert and --tls-key")
    ap.add_argument("--tls-cert", help="PEM certificate chain of the https listener")
    ap.add_argument("--tls-key", help="PEM private key of the https listener")
    ap.add_argument("--tls-client-ca", help="require client certificates signed by this CA on the https listener")
    args = ap.parse_args()

    server = Server(("127.0.0.1", args.port), Handler)
    server.store = Store(max(args.history, 1))
    server.recorder = Recorder(args.record)
    server.bookmark_interval = max(args.bookmark_interval, 0.05)
    server.verbose = args.verbose
    servers = [server]
    port = server.server_address[1]
    if args.kubeconfig_out:
        write_kubeconfig(args.kubeconfig_out, port)
    if args.tls_port is not None:
        if not (args.tls_cert and args.tls_key):
            ap.error("--tls-port needs --tls-cert and --tls-key")
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        if args.tls_client_ca:
            ctx.load_verify_locations(args.tls_client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        secure = Server(("127.0.0.1", args.tls_port), Handler)
        # The handshake runs in each connection's thread (see Server.finish_request's caller),
        # not in the accept loop: a client that never completes one blocks nobody else.
        secure.socket = ctx.wrap_socket(secure.socket, server_side=True, do_handshake_on_connect=False)
        secure.store, secure.recorder = server.store, server.recorder
        secure.bookmark_interval, secure.verbose = server.bookmark_interval, server.verbose
        servers.append(secure)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    for srv in servers:
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    print(f"kube-standin: listening on 127.0.0.1:{port}"
          + (f", https on 127.0.0.1:{servers[1].server_address[1]}" if len(servers) > 1 else ""), flush=True)
    while not stop.wait(0.5):
        pass
    server.store.stop()
    for srv in servers:
        srv.shutdown()
    deadline = time.monotonic() + 5
    with server.store.cond:
        while server.store.open_watches > 0 and time.monotonic() < deadline:
            server.store.cond.wait(0.1)
    for srv in servers:
        srv.server_close()
    server.recorder.close()


if __name__ == "__main__":
    main()
