"""The gate: an ASGI app in front of Prefect's server that lets each person do their role's job.

Every call carries HTTP Basic credentials (what Prefect's UI sends after its sign-in page, and its
client with an auth string); the gate checks them against the accounts (``privrelease.gate.accounts``), finds
the caller's rule in the access table (``privrelease.gate.access``) and passes the call on to Prefect with the operator's
credential, or refuses it: 401 without valid credentials where the route needs them, 403 naming
the role and the route otherwise. A row's condition, body rewrite or answer is a callable of
``privrelease.gate.rewrites`` or ``privrelease.gate.answers``, given the caller's account, the route's parameters and this gate (to read Prefect's
records). Three calls are rewritten on the way:

- starting a run (``create_flow_run``): only its parameters, name and scheduled time are kept; the
  parameters are checked against the form's schema, the worker's settings (job variables) cannot
  be set, and the run is tagged ``requested-by:<account>``, which the release flow records in the
  ledger as who asked; the account's limits (``privrelease.gate.quotas``) are applied before it is passed on;
- cancelling a run: only the caller's own, and only a cancellation;
- approving a paused release (stewards): the approver's name is written into the approval.

Every body is JSON (``application/json``: what a cross-site form cannot send) of bounded size and
nesting (``privrelease.gate.bounds``); failed sign-ins are logged with the name and address and throttled before
any hashing (``privrelease.gate.throttle``); every JSON answer passed back is cleared of the host's paths, name
and process ids (``privrelease.gate.redact``).
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from privrelease.core import limits, paths, settings
from privrelease.core.release.catalogue import Catalogue
from privrelease.core.release.home import Home
from privrelease.gate import access, bounds, headers
from privrelease.gate.accounts import Account, Accounts
from privrelease.gate.call import Call, Refused
from privrelease.gate.catalogue import Kept
from privrelease.gate.fair import Slots
from privrelease.gate.quotas import Quotas
from privrelease.gate.redact import Redactor
from privrelease.gate.signin import Refusal, SignIn

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}  # not passed back
REFUSED = "x-privrelease-gate-refused"  # on every answer the gate refused itself
UPSTREAM_CONNECTIONS = 100
BUSY_RETRIES = 8  # Prefect's 503 "busy" answers retried, about 9 s in all
ALONE_AT_ONCE = 2  # calls of the rows marked `alone` (Prefect works for them in its event loop) at once, in all
ALONE_WAITING = 1  # such calls of one account's waiting behind its one in progress; more are refused (429)
BROKEN = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.ConnectError)  # before any answer
SAFE_PATH = re.compile(r"/[A-Za-z0-9._~/-]*")  # what Prefect's routes and the UI's files use; nothing to re-encode
PROXIES = frozenset({"127.0.0.1", "::1"})  # peers whose X-Real-IP names the client (nginx on this host)
JSON = "application/json"
log = logging.getLogger("privrelease.gate")


def _refuse(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    # no WWW-Authenticate header: the browser shows Prefect's own sign-in page, not its native dialog; the message
    # twice: Prefect's error field, and `detail`, which the UI's forms show in their toast
    body = {"exception_message": message, "detail": message}
    return JSONResponse(body, status_code=status, headers={REFUSED: "1"} | (headers or {}))


UI = "x-prefect-ui"  # the header Prefect's UI sends with every call


def _refuse_form(request: Request, rule: access.Rule, status: int, message: str) -> JSONResponse:
    """A refused start of a run, as its form shows it: to Prefect's UI, 422 (it shows a 401, 403 or 5xx as its generic
    "Oops. Something went wrong.", and any other answer's `detail` in the form's toast: the role, the bound, the
    limit); to any other client, ``status``."""
    shown = 422 if rule.starts and status in (401, 403) and request.headers.get(UI) else status
    return _refuse(shown, message)


class Gate:
    CATALOGUE: type[Catalogue] = Kept  # the published releases and datasets it answers under /privrelease/

    def __init__(self, db_path: Path, upstream: str, operator_auth: str, rules: tuple[access.Rule, ...] | None = None):
        self.accounts = Accounts(db_path)
        self.signin = SignIn(self.accounts)
        self.rules = access.RULES if rules is None else rules
        self.redact = Redactor(db_path.parent, paths.repo())
        self.upstream = upstream.rstrip("/")
        self.operator = {"authorization": "Basic " + base64.b64encode(operator_auth.encode()).decode()}
        self.proof_key = headers.proof_key(operator_auth)
        self.client = httpx.AsyncClient(
            base_url=self.upstream,
            timeout=httpx.Timeout(60.0, connect=10.0),
            limits=httpx.Limits(max_connections=UPSTREAM_CONNECTIONS),
        )
        self._alone: dict[tuple[str, str], anyio.Lock] = {}  # per account and row
        self._alone_asked: dict[tuple[str, str], int] = {}  # calls in progress or waiting, per account and row
        self._alone_at_once = anyio.Semaphore(ALONE_AT_ONCE)
        self._told = -60.0  # when a defect's traceback was last logged
        configured = limits.configured()
        self.quotas: Quotas | None = Quotas(configured, self.count)  # None: no limits (tests' weakened gate)
        self.slots = Slots(configured.calls, configured.account_calls)  # signed-in calls in the gate, fairly shared
        self.catalogue = self.CATALOGUE(Home(db_path.parent))

    # -- who is asking --------------------------------------------------------------------------

    @staticmethod
    def address(request: Request) -> str:
        """The client's address: the proxy's X-Real-IP when the call comes from the proxy, else the socket's peer."""
        peer = request.client.host if request.client else "unknown"
        real = request.headers.get("x-real-ip", "").strip()
        if peer in PROXIES and real:
            try:
                return str(ipaddress.ip_address(real))
            except ValueError:
                pass
        return peer

    async def who(self, request: Request) -> Account | None | bool | Response:
        """The caller's account; None without credentials; False for wrong ones; a refusal while throttled."""
        header = request.headers.get("authorization")
        if header is None:
            return None
        named = headers.credentials(header)
        if named is None:
            return False
        shown = request.cookies.get(headers.PROOF, "").encode()  # bytes: a cookie may hold any character
        proven = hmac.compare_digest(shown, headers.proof(self.proof_key, header).encode())
        checked = await self.signin.check(*named, self.address(request), proven)
        if isinstance(checked, Refusal):
            return _refuse(429, f"privrelease gate: {checked.message}", {"retry-after": str(checked.wait)})
        return False if checked is None else checked

    # -- what Prefect knows of a deployment or a run (what the rows' conditions read) -----------------------

    async def read(self, path: str) -> Any | None:
        response = await self.upstream_call("GET", path, reads=True, headers=self.operator)
        return json.loads(self.redact(response.content)) if response.status_code == 200 else None

    async def find(self, path: str, body: dict) -> Any | None:
        response = await self.upstream_call("POST", path, reads=True, json=body, headers=self.operator)
        return json.loads(self.redact(response.content)) if response.status_code == 200 else None

    async def count(self, flow_runs: dict) -> int | None:
        """How many flow runs match Prefect's filter ``flow_runs``; None if the server does not say."""
        response = await self.upstream_call(
            "POST", "/api/flow_runs/count", reads=True, json={"flow_runs": flow_runs}, headers=self.operator
        )
        return response.json() if response.status_code == 200 else None

    # -- the one entry point ---------------------------------------------------------------------------

    async def __call__(self, request: Request) -> Response:
        try:
            response = await self.handle(request)
        except httpx.TransportError:  # Prefect's server did not answer a call the gate made for this one
            response = _refuse(502, "privrelease gate: Prefect's server did not answer this call; try it again")
        except Exception as exc:  # a defect: answered, so the connection stays usable; its traceback once a minute
            if time.monotonic() - self._told > 60:
                self._told = time.monotonic()
                log.exception("internal error on %s %s", request.method, request.url.path[:200])
            else:
                log.error("internal error on %s %s: %s", request.method, request.url.path[:200], type(exc).__name__)
            response = _refuse(500, "privrelease gate: internal error; the operator's gate log names it")
        if "authorization" in request.headers:
            response.headers["cache-control"] = "no-store"  # an answer to a person: no cache keeps it
        return response

    async def handle(self, request: Request) -> Response:
        path = request.url.path
        if self.malformed(path):
            return _refuse(400, "privrelease gate: malformed path")
        unreadable = headers.unreadable(request.headers.raw)
        if unreadable is not None:
            return _refuse(400, f"privrelease gate: {unreadable}")
        account = await self.who(request)
        if isinstance(account, Response):
            return account
        if account is False:
            return _refuse(401, "Unauthorized")
        if account is None:
            return await self.decided(request, path, None)
        refusal = self.slots.take(account.name)
        if refusal is not None:
            return _refuse(429, f"privrelease gate: {refusal}", {"retry-after": "1"})
        try:
            response = await self.decided(request, path, account)
        except BaseException:
            self.slots.give(account.name)
            raise
        held = Held(response, lambda: self.slots.give(account.name))
        proof = headers.proof(self.proof_key, request.headers["authorization"])
        if request.cookies.get(headers.PROOF) != proof:  # the proxy lets the next calls in as a person's
            secure = request.headers.get("x-forwarded-proto") == "https"
            days = headers.PROOF_DAYS * 86_400
            held.set_cookie(headers.PROOF, proof, max_age=days, secure=secure, httponly=True, samesite="strict")
        return held

    async def decided(self, request: Request, path: str, account: Account | None) -> Response:
        """The call of ``account`` (None: a caller without credentials) as the access table decides it."""
        role = account.role if account else access.ANONYMOUS
        rule = access.decide(role, request.method, path, self.rules)
        if rule is None:
            if account is None and path.startswith(("/api/", "/privrelease/api/")):
                return _refuse(401, "Unauthorized")  # the API is for people: sign in first
            return _refuse(403, f"privrelease gate: the {role} role may not {request.method} {path}")
        call = Call(account, rule.params(path), self, dict(request.query_params), request.headers.get("referer", ""))
        if rule.answer is not None:
            try:
                answered = await rule.answer(call)
            except Refused as refusal:
                return _refuse(refusal.status, refusal.message)
            return answered if isinstance(answered, Response) else JSONResponse(answered)
        body, doc = b"", None
        if request.method not in ("GET", "HEAD"):
            doc = await self.parse(request)
            if isinstance(doc, Response):
                return doc
            body = json.dumps(doc).encode() if doc is not None else b""
        if rule.alone:  # the checks below read Prefect too: they wait their turn with the call
            return await self.alone(account, rule, lambda: self.passed_on(request, path, rule, call, doc, body))
        return await self.passed_on(request, path, rule, call, doc, body)

    async def passed_on(self, request: Request, path: str, rule: access.Rule, call: Call, doc: Any, body: bytes) -> Response:
        """The call checked against the row's condition, its body rewritten, passed on, and its reply made."""
        if rule.when is not None and not await rule.when(call):
            role = call.account.role if call.account else access.ANONYMOUS
            what = "start a run of this deployment" if rule.starts else f"{request.method} {path}"
            return _refuse_form(
                request, rule, 403, f"privrelease gate: the {role} role may not {what} (only when {rule.when.says})"
            )
        if rule.body is not None:
            rewritten = await rule.body(doc if isinstance(doc, dict) else {}, call)
            if isinstance(rewritten, str):
                return _refuse_form(request, rule, 403, f"privrelease gate: {rewritten}")
            body = json.dumps(rewritten).encode()
            if self.quotas is not None and rule.starts:
                started = await self.quotas.start(call.account.name, rewritten, lambda: self.forward(request, path, body, False))
                return _refuse(started[0], f"privrelease gate: {started[1]}") if isinstance(started, tuple) else started
        response = await self.forward(request, path, body, rule.read_only)
        if rule.reply is not None and response.status_code == 200:
            return JSONResponse(rule.reply(json.loads(response.body), call))
        return response

    async def alone(self, account: Account, rule: access.Rule, call: Callable[[], Awaitable[Response]]) -> Response:
        """``call()`` of a row marked ``alone``: the account's one after the other (one more may wait; past that,
        429 at once, so that no queue holds the proxy's connections), and few of anyone's at once."""
        key = (account.name, rule.route)
        if self._alone_asked.get(key, 0) > ALONE_WAITING:
            return _refuse(
                429,
                f"privrelease gate: one of your calls of {rule.route} is in progress and one waits; try again when they are answered",
                {"retry-after": "1"},
            )
        self._alone_asked[key] = self._alone_asked.get(key, 0) + 1
        try:
            async with self._alone.setdefault(key, anyio.Lock()), self._alone_at_once:
                return await call()
        finally:
            self._alone_asked[key] -= 1

    @staticmethod
    def malformed(path: str) -> bool:
        """Whether a path holds what no route of Prefect's or the UI's does: a dot segment, an empty one, or
        any character to re-encode (a file of the catalogue is never named by a path a caller writes)."""
        return not SAFE_PATH.fullmatch(path) or "//" in path or "/." in path

    async def parse(self, request: Request) -> Any | Response:
        """The request's JSON body (None if it has none), or the gate's refusal: not JSON, too large, too deep,
        or holding what Prefect would resolve."""
        body = await bounds.body(request)
        if body is None:
            return _refuse(413, f"privrelease gate: a request body may hold at most {bounds.MAX_BODY} bytes")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if not body and not kind:
            return None
        if kind != JSON:
            return _refuse(
                415,
                f"privrelease gate: a request body must be JSON sent as Content-Type: {JSON}, "
                f"not {kind or 'without a Content-Type'}",
            )
        try:
            doc = bounds.loads(body or b"{}")
        except ValueError as error:  # not JSON, or a number past 64 bits
            return _refuse(422, f"privrelease gate: {error}")
        except RecursionError:  # deeper than Python's parser goes: far past the limit
            doc = None
        reason = (
            bounds.unfit(doc)
            if doc is not None
            else f"the JSON body nests too deep to read; at most {bounds.MAX_DEPTH} levels are allowed"
        )
        if reason is not None:
            return _refuse(400, f"privrelease gate: {reason}")
        if bounds.placeholders(doc):
            return _refuse(
                403,
                "privrelease gate: values Prefect would resolve on the server (__prefect_kind) "
                "are the operator's; send plain values",
            )
        return doc

    async def forward(self, request: Request, path: str, body: bytes, reads: bool) -> Response:
        passed = {k: v for k, v in request.headers.items() if k.lower() in headers.PASSED} | self.operator
        if body:
            passed["content-type"] = "application/json"
        try:
            params = bounds.url_query(request.query_params)
        except bounds.OutOfBounds as out:
            return _refuse(403, f"privrelease gate: {out}")
        # read whole (decoded) before answering: a caller that reads slowly holds no connection to Prefect
        response = await self.upstream_call(request.method, path, reads=reads, params=params, headers=passed, content=body)
        out = {k: v for k, v in response.headers.items() if k.lower() not in HOP}
        content = response.content
        if response.headers.get("content-type", "").startswith(JSON):
            content = self.redact(content)
        return Response(content, status_code=response.status_code, headers=out)

    async def upstream_call(self, method: str, path: str, reads: bool, **kwargs) -> httpx.Response:
        """One call to Prefect's server (``reads``: one that only reads). A SQLite-backed server answers 503
        ("retry") while its database is busy, before anything is committed; Prefect's own client retries those,
        and so does the gate for the UI, which does not."""
        broken = False
        for attempt in range(BUSY_RETRIES + 1):
            try:
                response = await self.client.request(method, path, **kwargs)
            except BROKEN:
                # Prefect closes its connection after answering a 500, and the pool may hand that connection to
                # the next caller: a read is asked again once on a fresh one (never a call that changes state)
                if broken or not reads:
                    raise
                broken = True
                continue
            if response.status_code != 503 or attempt == BUSY_RETRIES:
                break
            await anyio.sleep(0.25 * (attempt + 1))
        return response


class Held(Response):
    """An answer that holds its caller's slot (``privrelease.gate.fair``) until it is sent: a file of the catalogue, streamed
    from disk after the gate's decision, counts among the account's calls in progress while it is."""

    def __init__(self, response: Response, give: Callable[[], None]):
        self.response, self.give = response, give
        self.status_code, self.raw_headers = response.status_code, response.raw_headers  # the same list: one set of headers

    async def __call__(self, scope, receive, send) -> None:
        try:
            await self.response(scope, receive, send)
        finally:
            self.give()


async def _no_websockets(websocket: WebSocket) -> None:
    """No rule names a websocket route: every one is closed before it is accepted (HTTP 403)."""
    await websocket.close(code=1008)


def create_app(
    home: Path | None = None,
    upstream: str | None = None,
    operator_auth: str | None = None,
    gate_class: type[Gate] = Gate,
    rules: tuple[access.Rule, ...] | None = None,
) -> Starlette:
    """The gate as an ASGI app; ``gate_class`` and ``rules`` let the tests build one without a defence."""
    gate = gate_class(
        paths.database(home or paths.home()),
        upstream or settings.get(settings.PREFECT_URL),
        operator_auth if operator_auth is not None else settings.get(settings.PREFECT_AUTH, ""),
        rules,
    )
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    app = Starlette(
        routes=[WebSocketRoute("/{path:path}", _no_websockets), Route("/{path:path}", gate.__call__, methods=methods)]
    )
    app.state.gate = gate
    return app
