"""trainspec's secrets by reference: set each secret the spec references, then exec the rest.

Shipped as ``trainspec_secret_refs.py`` beside ``trainspec_shim.py`` in the jobs of a spec with
``secrets:`` (Slurm, HPC Pack, Ray, Azure ML; Kubernetes sets them itself from its Secrets), and
run in front of the shim in every process:

    python -I -S trainspec_secret_refs.py -- python -I -S trainspec_shim.py -- CMD...

The compiler writes where each secret is kept, never its value, in TRAINSPEC_SECRETS: a JSON
list of {"variable": NAME, "file": PATH} (read on this node) or {"variable": NAME, "keyvault":
URL, "secret" (its name in the vault), "identity", "client_id"} (an Azure Key Vault secret, read
with the job's identity). Each value is put in the environment and the rest of the command line is
exec'd; a secret that cannot be read ends the process with exit 3 and one line naming the
variable and where it is kept -- never a value or a token. docs/runtime.md, "Secrets".

One file, standard library only, Python >= 3.8; imports nothing else of trainspec.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping

ENV_SECRETS = "TRAINSPEC_SECRETS"  # the spec's secrets: where each is kept (JSON), never a value
ENV_SPEC = "TRAINSPEC_SPEC"  # the spec's path, for messages (the shim's name too)
# Tests only: an http://127.0.0.1:<port> that stands for every Key Vault (a spec cannot set a
# TRAINSPEC_* variable, and any other address is refused): tests/test_secret_refs.py
ENV_KEYVAULT_TEST_ENDPOINT = "TRAINSPEC_KEYVAULT_TEST_ENDPOINT"


class SecretError(Exception):
    """A secret that cannot be read: the message names the variable and where it is kept."""


SECRET_FILE_LIMIT = 65536  # bytes: a token or a key, not a data file
SECRET_TIMEOUT = 10  # seconds for each request to the identity endpoint and to Key Vault
KEYVAULT_API_VERSION = "7.4"  # GET {vault}/secrets/{name}?api-version=7.4
MSI_API_VERSION = "2017-09-01"  # Azure ML compute's MSI_ENDPOINT (azure-identity: AzureMLCredential)
MSI_SECRET_HEADER = "secret"  # the header that carries MSI_SECRET to MSI_ENDPOINT (azure-identity: AzureMLCredential)
IDENTITY_API_VERSION = "2019-08-01"  # IDENTITY_ENDPOINT/IDENTITY_HEADER (azure-identity: App Service)


def secret_values(env: Mapping[str, str]) -> dict[str, str]:
    """NAME -> value for every secret TRAINSPEC_SECRETS references (empty when none): read from a
    file on this node, or from Key Vault with the job's identity. A problem is a SecretError that
    names the variable and where it is kept, never a value or a token."""
    text = env.get(ENV_SECRETS, "").strip()
    if not text:
        return {}
    try:
        references = json.loads(text)
    except ValueError:
        references = None
    if not isinstance(references, list) or not all(
            isinstance(r, dict) and isinstance(r.get("variable"), str) for r in references):
        raise SecretError("%s is not the list of references trainspec writes; the job was edited, compile it again"
                          % ENV_SECRETS)
    spec = env.get(ENV_SPEC) or "the spec"
    values: dict[str, str] = {}
    tokens: dict[str, str] = {}  # one token per Key Vault cloud, for this process
    for reference in references:
        variable = reference["variable"]
        if isinstance(reference.get("file"), str):
            where = "%s: secrets.%s (file %s)" % (spec, variable, reference["file"])
            values[variable] = _secret_file(reference["file"], where)
        elif isinstance(reference.get("keyvault"), str) and isinstance(reference.get("secret"), str):
            where = "%s: secrets.%s (Key Vault %s, secret %s)" % (spec, variable, reference["keyvault"],
                                                                  reference["secret"])
            values[variable] = _keyvault_secret(env, reference, tokens, where)
        else:
            raise SecretError("%s: secrets.%s has no reference this platform reads; compile the job again"
                              % (spec, variable))
    return values


def _secret_text(data: bytes, where: str) -> str:
    """A secret's bytes as the value of a variable: UTF-8, no NUL, one trailing newline dropped."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretError("%s: the value is not UTF-8 text" % where) from None
    if text.endswith("\n"):
        text = text[:-2] if text.endswith("\r\n") else text[:-1]
    if "\x00" in text:
        raise SecretError("%s: the value holds a NUL byte, which no environment variable can" % where)
    if not text:
        raise SecretError("%s: the value is empty" % where)
    return text


def _secret_file(path: str, where: str) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(SECRET_FILE_LIMIT + 1)
    except OSError as error:
        raise SecretError("%s: cannot read it on this node (%s): the file must exist on every node, readable by the "
                          "user the job runs as" % (where, error.strerror or error)) from None
    if len(data) > SECRET_FILE_LIMIT:
        raise SecretError("%s: the file holds more than %d bytes: a secret file holds the value only"
                          % (where, SECRET_FILE_LIMIT))
    return _secret_text(data, where)


def _keyvault_secret(env: Mapping[str, str], reference: Mapping[str, object], tokens: dict[str, str],
                     where: str) -> str:
    """GET {vault}/secrets/{name}?api-version=7.4 with a Bearer token for https://vault.<cloud>."""
    from urllib.parse import quote, urlsplit

    vault = str(reference["keyvault"]).rstrip("/")
    host = urlsplit(vault).hostname or ""
    if not vault.startswith("https://") or ".vault." not in host:
        raise SecretError("%s: not a Key Vault URL (https://<vault>.vault.azure.net)" % where)
    resource = "https://" + host.split(".", 1)[1]  # https://vault.azure.net, or a sovereign cloud's
    if resource not in tokens:
        tokens[resource] = _identity_token(env, resource, reference, where)
    test = env.get(ENV_KEYVAULT_TEST_ENDPOINT, "").strip()
    if test:
        if not test.startswith("http://127.0.0.1:") or not test[len("http://127.0.0.1:"):].isdigit():
            raise SecretError("%s=%r: only a test sets it, to http://127.0.0.1:<port>"
                              % (ENV_KEYVAULT_TEST_ENDPOINT, test))
        vault = test
    url = "%s/secrets/%s?api-version=%s" % (vault, quote(str(reference["secret"]), safe=""), KEYVAULT_API_VERSION)
    status, body = _http_get(url, {"Authorization": "Bearer " + tokens[resource]}, where)
    if status == 200:
        try:
            value = json.loads(body.decode("utf-8"))["value"]
        except (ValueError, KeyError, TypeError):
            value = None
        if not isinstance(value, str):
            raise SecretError("%s: Key Vault's answer holds no value" % where)
        return _secret_text(value.encode("utf-8"), where)
    why = {401: "Key Vault did not accept the job's token",
           403: "the job's identity may not read it: grant it the Key Vault Secrets User role on the vault "
                "(or a get-secret access policy)",
           404: "the vault has no such secret (or it is disabled)"}.get(status, "Key Vault answered HTTP %d" % status)
    raise SecretError("%s: %s (HTTP %d%s)" % (where, why, status, _error_code(body)))


def _identity_token(env: Mapping[str, str], resource: str, reference: Mapping[str, object], where: str) -> str:
    """An access token for ``resource`` from the job's identity, as azure-identity asks for one:
    the on-behalf-of endpoint (identity user_identity: OBO_ENDPOINT), else the managed identity
    endpoint (IDENTITY_ENDPOINT + IDENTITY_HEADER, or Azure ML's MSI_ENDPOINT + MSI_SECRET; a
    user-assigned identity by its client id, the spec's or DEFAULT_IDENTITY_CLIENT_ID)."""
    from urllib.parse import urlencode

    identity = reference.get("identity")
    client_id = reference.get("client_id") or env.get("DEFAULT_IDENTITY_CLIENT_ID", "").strip() or None
    obo = env.get("OBO_ENDPOINT", "").strip()
    if identity == "user_identity" or (identity is None and obo):
        if not obo:
            raise SecretError("%s: the job runs as its submitter (identity user_identity), but OBO_ENDPOINT is not "
                              "set: this compute gives the job no token on the submitter's behalf; use identity "
                              "managed" % where)
        url, headers, who = obo + "?" + urlencode({"resource": resource}), {}, "the submitter's identity (OBO_ENDPOINT)"
    elif env.get("IDENTITY_ENDPOINT", "").strip() and env.get("IDENTITY_HEADER", "").strip():
        query = {"api-version": IDENTITY_API_VERSION, "resource": resource,
                 **({"client_id": client_id} if client_id else {})}
        url = env["IDENTITY_ENDPOINT"].strip() + "?" + urlencode(query)
        headers, who = {"X-IDENTITY-HEADER": env["IDENTITY_HEADER"].strip()}, "the managed identity (IDENTITY_ENDPOINT)"
    elif env.get("MSI_ENDPOINT", "").strip() and env.get("MSI_SECRET", "").strip():
        query = {"api-version": MSI_API_VERSION, "resource": resource, **({"clientid": client_id} if client_id else {})}
        url = env["MSI_ENDPOINT"].strip() + "?" + urlencode(query)
        headers, who = {MSI_SECRET_HEADER: env["MSI_SECRET"].strip()}, "the managed identity (MSI_ENDPOINT)"
    else:
        raise SecretError("%s: this job has no identity to ask Key Vault with (no MSI_ENDPOINT/MSI_SECRET, "
                          "IDENTITY_ENDPOINT/IDENTITY_HEADER or OBO_ENDPOINT): give the compute cluster a managed "
                          "identity, or run the job with identity user_identity" % where)
    status, body = _http_get(url, {"Metadata": "true", **headers}, where)
    token = None
    if status == 200:
        try:
            token = json.loads(body.decode("utf-8")).get("access_token")
        except (ValueError, AttributeError):
            token = None
    if not isinstance(token, str) or not token:
        raise SecretError("%s: %s gave no token for %s (HTTP %d%s)" % (where, who, resource, status, _error_code(body)))
    return token


def _error_code(body: bytes) -> str:
    """', <code>' from an Azure error answer ({"error": {"code": ...}} or {"error": "..."}), else ''."""

    try:
        error = json.loads(body.decode("utf-8")).get("error")
    except (ValueError, AttributeError):
        return ""
    code = error.get("code") if isinstance(error, dict) else error
    return ", %s" % code if isinstance(code, str) and code.replace("_", "").replace(".", "").isalnum() else ""


def _http_get(url: str, headers: Mapping[str, str], where: str) -> tuple[int, bytes]:
    """(status, at most 1 MiB of the body) of a GET that follows no redirect (a token is never sent
    elsewhere), within SECRET_TIMEOUT seconds."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    request = urllib.request.Request(url, headers=dict(headers), method="GET")
    try:
        with opener.open(request, timeout=SECRET_TIMEOUT) as answer:
            return answer.status, answer.read(1 << 20)
    except urllib.error.HTTPError as error:
        try:
            body = error.read(1 << 20)
        except OSError:
            body = b""
        return error.code, body
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        host = url.split("/")[2] if url.count("/") >= 2 else url
        raise SecretError("%s: cannot reach %s within %s s (%s)"
                          % (where, host.split("?")[0], SECRET_TIMEOUT, reason)) from None


USAGE = "usage: python trainspec_secret_refs.py -- CMD [ARG...]"


def main(argv: list[str] | None = None) -> int:
    """Set the secrets TRAINSPEC_SECRETS references, then exec CMD (the shim, in a compiled job)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args or args[0].startswith("-"):
        print("trainspec: error: no command to run\n%s" % USAGE, file=sys.stderr)
        return 2
    try:
        os.environ.update(secret_values(os.environ))
    except SecretError as error:
        print("trainspec: error: %s" % error, file=sys.stderr)
        return 3
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(args[0], args)
    except OSError as error:
        print("trainspec: error: cannot run %s: %s" % (args[0], error.strerror), file=sys.stderr)
        return 127
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
