"""A client for the flow execution service (the hosted one, or ``flownb serve``), on ``requests``.

:class:`Client` speaks the contract: :meth:`Client.get_flow_info`, :meth:`Client.run` (raw JSON
in, raw JSON out) and :meth:`Client.flow`, which returns a :class:`RemoteFlow` with the same
interface as a local flow (``variables``, ``outputs``, ``run``, ``run_batch``,
``run_dataframe``, ``form``). :meth:`Client.flows` lists the flows of a ``flownb serve``.

Large batches are split into chunks the server accepts (its advertised limit, else 1,000
elements; and under its body-size limit) sent in parallel, a bounded number at a time. Answers
429/502/503/504 and dropped connections are retried with exponential backoff that honours
``Retry-After`` (``0`` means now); when the server answers a batch with some elements done, those
are kept and only the failed ones are sent again, so nothing paid for is run twice. Describe
requests are idempotent and use urllib3's own ``Retry``. A refused or unreachable address is
tried once more at once, then fails with :class:`~flownb.errors.ServiceUnavailable` (not after a
backoff: nothing listening is not a passing state); no answer in time is
:class:`~flownb.errors.ServiceTimeout`.

:meth:`RemoteFlow.stream` / ``astream`` run once with ``Accept: text/event-stream`` (the
extension ``flownb serve`` answers with server-sent events while the run goes; see
:mod:`flownb.server.sse`) and yield the text as it arrives; a streamed run is not retried. A
service without the extension answers JSON, which then comes as one event per output.

Every failure surfaces as a flownb exception whose message is the server's message. The API key
is sent only in the ``x-api-key`` header, never follows a redirect, and appears in no repr, log
line or exception.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any
from urllib.parse import quote, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError, ReadTimeoutError
from urllib3.util.retry import Retry

from ..config.settings import DEFAULT_MAX_BATCH, resolve_run_config
from ..error_map import parse_retry_after, retry_delay
from ..errors import (
    ApiError,
    BatchError,
    ConfigError,
    FlownbError,
    InputError,
    Problem,
    ServiceTimeout,
    ServiceUnavailable,
)
from .client_errors import (
    _element_errors,
    _error_from,
    _json,
    _json_or_none,
    _path,
    _unreachable,
)
from .client_stream import read_events
from .remote import Items, RemoteFlow

__all__ = ["Client", "RemoteFlow"]


RETRY_STATUSES = frozenset({429, 502, 503, 504})


DEFAULT_PARALLEL = 4


# One element's outcome: its run output items, or the exception it failed with.
Outcome = tuple[Items | None, FlownbError | None]


class _Dropped(Exception):
    """The connection dropped mid-request (worth retrying), wrapping requests' error."""


class Client:
    """A connection to a flow execution service.

    Args:
        base_url: the service's address (``http://127.0.0.1:8000``); default ``FLOWNB_BASE_URL``.
        api_key: the API key; default ``FLOWNB_API_KEY``.
        timeout: seconds to wait for an answer to one request.
        max_retries: retries of a request answered 429/502/503/504 or cut off.
        max_parallel: chunk requests in flight at once for one batch (a remote flow's
            ``concurrency=`` argument overrides it per call).
        batch_size: most elements per request; default the server's advertised limit.
        backoff: base of the exponential backoff, in seconds (when no ``Retry-After``).

    Raises:
        ConfigError: no base URL or API key, or an address that is not http(s).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        max_retries: int = 5,
        max_parallel: int = DEFAULT_PARALLEL,
        batch_size: int | None = None,
        backoff: float = 0.5,
    ) -> None:
        config = resolve_run_config(local=False)
        base_url = base_url or config.service_url
        if not base_url:
            raise ConfigError(
                "no service address: pass base_url=... or set FLOWNB_BASE_URL "
                "(e.g. http://127.0.0.1:8000 for flownb serve)"
            )
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"base_url must be an http(s) address, got {base_url!r}")
        key = api_key or config.service_key
        if not key:
            raise ConfigError(
                "no API key: pass api_key=... or set FLOWNB_API_KEY "
                "(for flownb serve, create one with: flownb keys create --name NAME)"
            )
        if max_retries < 0 or max_parallel < 1 or (batch_size is not None and batch_size < 1):
            raise ConfigError("max_retries must be >= 0, max_parallel and batch_size >= 1")
        base = base_url.rstrip("/")
        # The contract's paths all start with /api; accept an address given with it.
        self.base_url = base[: -len("/api")] if base.endswith("/api") else base
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_parallel = max_parallel
        self.batch_size = batch_size
        self.backoff = backoff
        self.__key = key
        self._limits: dict[str, int] = {}
        self._session = requests.Session()
        # Describe is idempotent: urllib3 retries it (statuses, reads). Runs are retried by
        # this class (partial results). A failed connect is retried once, at once (urllib3
        # sleeps only from the second retry on): a refused port fails fast.
        retry = Retry(
            total=max_retries,
            connect=min(1, max_retries),
            read=max_retries,
            status=max_retries,
            backoff_factor=backoff,
            status_forcelist=RETRY_STATUSES,
            allowed_methods=frozenset({"GET"}),
            respect_retry_after_header=True,
            raise_on_status=False,
            raise_on_redirect=False,
            redirect=0,
        )
        adapter = HTTPAdapter(
            max_retries=retry, pool_connections=4, pool_maxsize=max(10, max_parallel * 2)
        )
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Client(base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the connection pool."""
        self._session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the contract ----------------------------------------------------------------------------

    def get_flow_info(self, flow_id: str) -> list[dict[str, str]]:
        """Return the flow's describe response: ``[{"name", "type"}]``, variables then outputs.

        Raises:
            FlowNotFound, AuthError, ApiError: as the service answered.
            ServiceUnavailable, ServiceTimeout: the service cannot be reached, or did not answer.
        """
        return self._describe(flow_id)[0]

    def flows(self) -> list[dict[str, Any]]:
        """Return the flows the service serves (``GET /api/flows``, a ``flownb serve``
        route beyond the contract): for each, ``{"id", "name", "variables", "outputs"}``, the
        lists in node order.

        Raises:
            AuthError, ApiError: as the service answered (a service without the route: 404).
            ServiceUnavailable, ServiceTimeout: the service cannot be reached, or did not answer.
        """
        resp = self._request("GET", f"{self.base_url}/api/flows")
        if resp.status_code != 200:
            raise _error_from(resp)
        data = _json(resp)
        if not isinstance(data, list) or not all(
            isinstance(f, dict)
            and isinstance(f.get("id"), str)
            and isinstance(f.get("variables"), list)
            and isinstance(f.get("outputs"), list)
            for f in data
        ):
            raise ApiError(f"unexpected flow list from {_path(resp.url)}", status=resp.status_code)
        return data

    def run(self, flow_id: str, variables: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Any:
        """Run a flow with the contract's ``variables``: an object runs once and returns its list
        of output items; an array runs once per element and returns a list of such lists.

        Arrays longer than the server's limit are sent in chunks, in parallel.

        Raises:
            InputError: the service refused the variables (every problem listed).
            BatchError: some elements of an array failed; ``.results`` keeps the others' items.
            ProviderError, RateLimited, ProviderTimeout: a single run failed at the provider.
            FlowNotFound, AuthError, ApiError: as the service answered.
            ServiceUnavailable, ServiceTimeout: the service cannot be reached, or did not answer.
        """
        if isinstance(variables, Mapping):
            items, exc = self._run_chunk(flow_id, [variables], single=True)[0]
            if exc is not None:
                raise exc
            return items
        batch = list(variables)
        results: list[Items | None] = [None] * len(batch)
        errors: dict[int, BaseException] = {}

        def collect(i: int, items: Items | None, exc: FlownbError | None) -> None:
            if exc is None:
                results[i] = items
            else:
                errors[i] = exc

        self.run_elements(flow_id, batch, collect, self.max_parallel)
        if errors:
            raise BatchError(results, errors)
        return results

    def flow(self, flow_id: str) -> RemoteFlow:
        """Return the flow ``flow_id`` with the same interface as a local flow.

        Raises:
            FlowNotFound, AuthError, ApiError: as the service answered the describe request.
            ServiceUnavailable, ServiceTimeout: the service cannot be reached, or did not answer.
        """
        info, headers = self._describe(flow_id)
        return RemoteFlow(self, flow_id, info, headers.get("x-flownb-image-outputs"))

    # -- HTTP --------------------------------------------------------------------------------

    def _url(self, route: str, flow_id: str) -> str:
        # Quoted whole: a flow id cannot reach another path ("../", "?", "#").
        return f"{self.base_url}/api/flows/{route}/{quote(flow_id, safe='')}"

    def stream_run(
        self, flow_id: str, variables: Mapping[str, Any]
    ) -> Generator[tuple[str, Any], None, None]:
        """Run a flow once with ``Accept: text/event-stream``; yield each server-sent event as
        ``(name, data)`` as it arrives (see :mod:`flownb.server.sse`). A service that answers
        JSON instead yields one ``("result", items)``. Before the stream starts, an answer
        worth retrying (429, 502-504, a dropped connection) or a refusal to stream (406) falls
        back to :meth:`run` (retried as usual); once text has come, nothing is retried.

        Raises:
            InputError, FlowNotFound, AuthError, ApiError: as the service answered.
            ServiceUnavailable, ServiceTimeout: the service cannot be reached, or went silent.
        """
        url = self._url("run", flow_id)
        try:
            resp = self._request("POST", url, {"variables": dict(variables)}, stream=True)
        except _Dropped:
            yield "result", self.run(flow_id, variables)
            return
        with resp:
            if resp.status_code == 406 or resp.status_code in RETRY_STATUSES:
                resp.close()
                yield "result", self.run(flow_id, variables)
                return
            if resp.status_code >= 400:
                raise _error_from(resp)
            if "text/event-stream" not in resp.headers.get("content-type", ""):
                yield "result", _json(resp)
                return
            try:
                # chunk_size=None: each piece as it arrives, not once 512 bytes are in.
                yield from read_events(resp.iter_lines(chunk_size=None))  # type: ignore[call-overload]
            except requests.RequestException as exc:
                raise ServiceUnavailable(
                    f"POST {_path(url)}: the event stream broke off ({type(exc).__name__})"
                ) from None

    def _request(
        self, method: str, url: str, body: Any = None, *, stream: bool = False
    ) -> requests.Response:
        accept = "text/event-stream" if stream else "application/json"
        headers = {"x-api-key": self.__key, "Accept": accept}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            try:
                data = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
            except (TypeError, ValueError) as exc:
                raise InputError(
                    [Problem("invalid_variable_type", f"variables cannot be sent as JSON: {exc}")]
                ) from None
        try:
            resp = self._session.request(
                method,
                url,
                data=data,
                headers=headers,
                # A service that cannot be reached fails fast; a slow answer gets the full time.
                timeout=(min(10.0, self.timeout), self.timeout),
                allow_redirects=False,
                stream=stream,
            )
        except requests.ConnectionError as exc:  # also ConnectTimeout
            cause = exc.args[0] if exc.args else None
            if isinstance(cause, MaxRetryError) and isinstance(cause.reason, ReadTimeoutError):
                raise ServiceTimeout(
                    f"{method} {_path(url)}: no answer within {self.timeout:g} s"
                ) from None
            if method == "POST" and not isinstance(cause, MaxRetryError):
                raise _Dropped(type(cause or exc).__name__) from None  # cut off: caller retries
            raise _unreachable(method, url, exc) from None
        except requests.Timeout:
            raise ServiceTimeout(
                f"{method} {_path(url)}: no answer within {self.timeout:g} s"
            ) from None
        except requests.RequestException as exc:
            raise ServiceUnavailable(
                f"{method} {_path(url)} failed: {type(exc).__name__}"
            ) from None
        self._learn_limits(resp)
        if 300 <= resp.status_code < 400:
            raise ApiError(
                f"the service redirected {_path(url)} to {resp.headers.get('location')!r}; "
                "use that address as base_url (the API key is never sent to a redirect)",
                status=resp.status_code,
                code="redirect",
            )
        return resp

    def _learn_limits(self, resp: requests.Response) -> None:
        for header, name in (
            ("x-flownb-max-batch", "batch"),
            ("x-flownb-max-body-bytes", "body"),
        ):
            value = resp.headers.get(header)
            if value and value.isdigit() and int(value) > 0:
                self._limits[name] = int(value)

    def _describe(self, flow_id: str) -> tuple[list[dict[str, str]], Mapping[str, str]]:
        resp = self._request("GET", self._url("getFlowInfo", flow_id))
        if resp.status_code != 200:
            raise _error_from(resp)
        data = _json(resp)
        if not isinstance(data, list) or not all(
            isinstance(i, dict) and isinstance(i.get("name"), str) for i in data
        ):
            raise ApiError(
                f"unexpected describe response from {_path(resp.url)}", status=resp.status_code
            )
        return data, resp.headers

    # -- running -----------------------------------------------------------------------------

    def _chunks(self, batch: Sequence[Mapping[str, Any]]) -> list[list[int]]:
        """Split element indices into requests within the server's count and size limits."""
        size = self.batch_size or self._limits.get("batch", DEFAULT_MAX_BATCH)
        max_body = self._limits.get("body")
        chunks: list[list[int]] = []
        current: list[int] = []
        used = 16  # '{"variables":[]}'
        for i, values in enumerate(batch):
            cost = (
                len(json.dumps(values, ensure_ascii=False).encode("utf-8")) + 1 if max_body else 0
            )
            if current and (len(current) >= size or (max_body and used + cost > max_body)):
                chunks.append(current)
                current, used = [], 16
            current.append(i)
            used += cost
        if current:
            chunks.append(current)
        return chunks

    def run_elements(
        self,
        flow_id: str,
        batch: Sequence[Mapping[str, Any]],
        on_element: Callable[[int, Items | None, FlownbError | None], None],
        parallel: int,
    ) -> None:
        """Run ``batch`` in chunks, ``parallel`` requests at a time, reporting every element to
        ``on_element(index, items, None)`` or ``on_element(index, None, error)`` as its request
        ends. The remote flow's batches and :meth:`run` both come here.

        Raises:
            FlownbError: a request was refused outright (key, flow id, shape) before any element
                succeeded; once some have, refusals are reported per element instead.
        """
        if not batch:
            return
        chunks = self._chunks(batch)
        succeeded = 0
        fatal: FlownbError | None = None
        held: list[tuple[int, Items | None, FlownbError | None]] = []
        unsent: list[int] = []
        workers = min(parallel, len(chunks))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flownb-client")
        pending: dict[Future[list[Outcome]], list[int]] = {}
        queue = iter(chunks)

        def submit() -> None:
            idx = next(queue, None)
            if idx is not None:
                elements = [batch[i] for i in idx]
                pending[pool.submit(self._run_chunk, flow_id, elements)] = idx

        for _ in range(workers):
            submit()
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    idx = pending.pop(fut)
                    try:
                        outcomes = fut.result()
                    except FlownbError as exc:
                        fatal = fatal or exc
                        outcomes = [(None, exc)] * len(idx)
                    for i, (items, failure) in zip(idx, outcomes, strict=True):
                        if failure is None:
                            succeeded += 1
                            on_element(i, items, None)
                        elif fatal is not None:
                            held.append((i, None, failure))  # decided once all is back
                        else:
                            on_element(i, None, failure)
                    if fatal is None:
                        submit()
        except BaseException:
            # Ctrl-C or a bug: stop at once; requests in flight finish in their threads, and
            # every element already reported stays reported.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        for idx in queue:  # chunks never sent because of the refusal
            unsent.extend(idx)
        if fatal is not None:
            if succeeded == 0:
                raise fatal
            # Some elements succeeded: keep them; everything else fails with its reason.
            for i, items, failure in held:
                on_element(i, items, failure)
            for i in unsent:
                on_element(i, None, fatal)

    def _run_chunk(
        self, flow_id: str, elements: list[Mapping[str, Any]], *, single: bool = False
    ) -> list[Outcome]:
        """Send one request's elements, retrying what failed for a retryable reason.

        Returns:
            Each element's outcome, in order.

        Raises:
            FlownbError: the request was refused outright (401, 404, 400, 413, 422).
        """
        url = self._url("run", flow_id)
        out: list[Outcome | None] = [None] * len(elements)
        pending = list(range(len(elements)))
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            body = {"variables": elements[0] if single else [elements[i] for i in pending]}
            try:
                resp = self._request("POST", url, body)
            except _Dropped as exc:
                if last:
                    dropped = ServiceUnavailable(
                        f"POST {_path(url)}: the connection dropped {attempt + 1} times ({exc})"
                    )
                    for i in pending:
                        out[i] = (None, dropped)
                    break
                time.sleep(self._backoff(attempt))
                continue
            if resp.status_code == 200:
                _take_answers(resp, url, pending, out, single=single)
                break
            error = _error_from(resp)
            too_big = resp.status_code == 413 or error.code == "batch_too_large"
            if too_big and not single and len(pending) > 1:
                self._run_halves(flow_id, elements, pending, out)
                break
            failed = _take_failures(resp, error, pending, out)
            if last or resp.status_code not in RETRY_STATUSES or not failed:
                break
            pending = failed
            time.sleep(self._delay(resp, attempt))
        return out  # type: ignore[return-value]

    def _run_halves(
        self,
        flow_id: str,
        elements: list[Mapping[str, Any]],
        pending: list[int],
        out: list[Outcome | None],
    ) -> None:
        """Send the ``pending`` elements in two requests, each half as large, into ``out``: a
        service with a smaller limit than assumed (it did not advertise one) refused them as
        too large; the smaller limit is remembered."""
        half = len(pending) // 2
        with self._lock:
            self._limits["batch"] = min(self._limits.get("batch", half), half)
        for part in (pending[:half], pending[half:]):
            done = self._run_chunk(flow_id, [elements[i] for i in part])
            for i, outcome in zip(part, done, strict=True):
                out[i] = outcome

    def _backoff(self, attempt: int) -> float:
        # flownb's one retry policy (the providers' too), from this client's base.
        return retry_delay(attempt, None, base=self.backoff)

    def _delay(self, resp: requests.Response, attempt: int) -> float:
        hint = parse_retry_after(resp.headers.get("Retry-After"))
        return retry_delay(attempt, hint, base=self.backoff)


def _take_answers(
    resp: requests.Response,
    url: str,
    pending: list[int],
    out: list[Outcome | None],
    *,
    single: bool,
) -> None:
    """Put a 200 answer's results for the ``pending`` elements into ``out``.

    Raises:
        ApiError: the answer does not hold one result per element sent.
    """
    data = _json(resp)
    got = [data] if single else data
    if not isinstance(got, list) or len(got) != len(pending):
        raise ApiError(
            f"unexpected run response from {_path(url)}: expected {len(pending)} result(s)",
            status=200,
        )
    for j, i in enumerate(pending):
        out[i] = (got[j], None)


def _take_failures(
    resp: requests.Response, error: FlownbError, pending: list[int], out: list[Outcome | None]
) -> list[int]:
    """Put a failed answer's outcomes for the ``pending`` elements into ``out``: the results it
    kept, and each other element's error; return the elements that failed.

    Raises:
        FlownbError: ``error``, when the request was refused outright (a 4xx that is not
            retried and holds no results).
    """
    body = _json_or_none(resp)
    results = body.get("results") if isinstance(body, dict) else None
    element_errors = _element_errors(body, error, len(pending))
    if not (isinstance(results, list) and len(results) == len(pending)):
        if resp.status_code not in RETRY_STATUSES and resp.status_code < 500:
            raise error
        for j, i in enumerate(pending):
            out[i] = (None, element_errors.get(j, error))
        return list(pending)
    failed = []
    for j, i in enumerate(pending):
        # A row with a result *and* an error kept only part of its outputs (a node failed): it
        # failed, and is retried like any failed row.
        if results[j] is not None and j not in element_errors:
            out[i] = (results[j], None)
        else:
            failed.append(i)
            out[i] = (None, element_errors.get(j, error))
    return failed
