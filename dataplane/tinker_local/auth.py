"""The local server's credentials: its API key, and short-lived JWTs exchanged for it.

The tinker SDK exchanges its API key for a JWT at /api/v1/auth/token when the server's client config
says `pjwt_auth_enabled` (Tinker cloud does), and `RestClient.whoami()` reads the caller's identity
from that JWT's claims: with a plain API key it fails ("whoami requires JWT auth"). So this server
mints JWTs too (HS256, signed with a key derived from its API key, so they die with the run's
credential) for one fixed local principal, and accepts either credential as X-API-Key. An expired or
forged JWT is answered 401 `invalid_token`, on which the SDK exchanges its key again.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

from fastapi.responses import JSONResponse

from .context import NO_RETRY

OPEN_PATHS = frozenset({"/healthz", "/api/v1/healthz"})  # readiness probes: they change and reveal nothing
TOKEN_PATH = "/api/v1/auth/token"
JWT_LIFETIME_S = 3600  # the SDK refreshes at about half of it
# The identity whoami reports: one local user in one local organization (no email: not user-backed).
LOCAL_USER_URN = "tml:user:local"
LOCAL_ORG_ID = "local"
ISSUER = "tinker-local"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Credential:
    """The server's API key and the JWTs it mints and checks."""

    def __init__(self, api_key: str):
        self.api_key = api_key.encode()
        self._signing_key = hmac.new(self.api_key, b"tinker-local jwt", hashlib.sha256).digest()

    def is_api_key(self, given: bytes) -> bool:
        return hmac.compare_digest(given, self.api_key)

    def mint(self, now: float | None = None) -> str:
        issued = int(time.time() if now is None else now)
        header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        claims = {
            "iss": ISSUER,
            "sub": LOCAL_USER_URN,
            "org_id": LOCAL_ORG_ID,
            "email": "",
            "iat": issued,
            "exp": issued + JWT_LIFETIME_S,
        }
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{header}.{payload}.{self._sign(f'{header}.{payload}')}"

    def _sign(self, signed_part: str) -> str:
        return _b64(hmac.new(self._signing_key, signed_part.encode(), hashlib.sha256).digest())

    def jwt_is_valid(self, token: bytes) -> bool:
        """Signed by this server and not expired."""
        try:
            header, payload, signature = token.decode("ascii").split(".")
            if not hmac.compare_digest(signature, self._sign(f"{header}.{payload}")):
                return False
            return float(json.loads(_unb64(payload))["exp"]) > time.time()
        except (ValueError, KeyError, TypeError):
            return False


def _refusal(message: str, *, invalid_token: bool = False) -> JSONResponse:
    headers = dict(NO_RETRY)
    if invalid_token:
        # RFC 6750: the SDK's JWT auth flow exchanges its key again and replays the request once.
        headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
    return JSONResponse({"error": message, "category": "user"}, status_code=401, headers=headers)


class RequireCredential:
    """Every request but the readiness probes must carry the server's API key or a JWT it minted as
    X-API-Key; /api/v1/auth/token (the exchange) only the API key, so a JWT cannot renew itself.

    A plain ASGI middleware: FastAPI's `@app.middleware("http")` wraps every request and response in
    extra tasks and streams, which on a tiny model cost more CPU than the model's own work."""

    def __init__(self, app, credential: Credential):
        self.app = app
        self.credential = credential

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            given = next((value for name, value in scope["headers"] if name == b"x-api-key"), b"")
            refusal = self._check(scope["path"], given)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _check(self, path: str, given: bytes) -> JSONResponse | None:
        if self.credential.is_api_key(given):
            return None
        if given.startswith(b"eyJ") and given.count(b".") == 2:
            if path == TOKEN_PATH:
                return _refusal("a JWT cannot be exchanged for another: send this server's API key")
            if self.credential.jwt_is_valid(given):
                return None
            return _refusal("expired or unknown JWT: exchange the API key again", invalid_token=True)
        return _refusal("missing or wrong API key: send this server's credential as X-API-Key")
