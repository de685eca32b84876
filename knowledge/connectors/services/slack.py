"""The Slack connector: one document per thread of the channels the app is in.

Read with ``slack_sdk``'s ``WebClient`` at ``source.location`` (``https://slack.com/api/`` by
default), every request through the outbound address guard (``GuardedWebClient``) and retried
by slack_sdk's own retry handlers: a 429 waits the ``Retry-After`` Slack asks (at most
``MAX_RETRY_AFTER_S``), a 5xx or a dropped connection is tried again with exponential backoff,
``KB_CONNECTOR_RETRIES`` times. ``docs/connectors.md`` ("Slack") says it for people:

* channels: public and private ones the app is a member of, or only those ``options["channels"]``
  names (``"#general"``, ``"general"`` or an id like ``"C0123"``);
* a document per thread, keyed ``"<channel id>/<parent ts>"``: the parent message, then its
  replies, each with its author and time; a message without replies is a thread of one;
* ``changes``: per channel, one ``conversations.history`` for the new threads and the recent
  ones (``lookback_days``) whose latest reply or edit is newer than the checkpoint, and a
  ``conversations.replies`` for each of those with replies; ``listing``: every thread with its
  ``reply_count``, ``latest_reply`` and edit time as fingerprint, so a full sync also re-reads
  older threads that changed and drops deleted ones (Slack has no feed of edits or deletions);
* permissions: a public channel's threads are everyone's (``PUBLIC``); a private channel's are
  its members' (``SourceGroup(channel id, "slack:#name", e-mails)``), or the admins' only
  (``None``) when its members cannot be read.
"""

from __future__ import annotations

import http.client
import io
import logging
import random
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cached_property
from urllib.error import HTTPError, URLError

from django.conf import settings
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.http_retry import BackoffRetryIntervalCalculator, ConnectionErrorRetryHandler, Jitter
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler, ServerErrorRetryHandler

from core.errors import InvalidInput
from core.outbound import FETCH_FAILED, AddressNotAllowed, guarded_pool_manager
from knowledge.connectors.base import PUBLIC, CredentialRejected, Item, Permission, SourceGroup, SourceUnreachable
from knowledge.connectors.http import MAX_BACKOFF_S, MAX_RESPONSE_BYTES, RETRY_STATUSES, retry_caps, status_raise
from knowledge.ingestion.documents import ReadDocument, locate_sections, normalize_text

logger = logging.getLogger(__name__)

KIND = "slack"
# ``changes`` looks again at threads started this many days before the latest activity stored.
DEFAULT_LOOKBACK_DAYS = 7
# Page sizes: Slack's maximum for history (999), its advice for the lists of people (200).
HISTORY_PAGE = 999
LIST_PAGE = 1000
PEOPLE_PAGE = 200
# Slack's answers that say the token itself is refused (its "error" field, with HTTP 200).
CREDENTIAL_ERRORS = frozenset(
    "invalid_auth not_authed token_revoked token_expired account_inactive missing_scope no_permission "
    "not_allowed_token_type org_login_required team_access_not_granted ekm_access_denied".split()
)
# Answers that say a channel or a thread is gone (or the app was removed from the channel).
GONE_ERRORS = frozenset({"channel_not_found", "not_in_channel", "thread_not_found", "message_not_found"})
# ``conversations.members``' own errors: that channel's threads fail closed.
MEMBER_ERRORS = frozenset({"channel_not_found", "not_in_channel", "fetch_members_failed", "invalid_cursor"})
# Messages that are not content (joins, leaves, topic and name changes), and the "tombstone" left
# by a deleted first message that had replies: the thread is gone.
NOISE_SUBTYPES = frozenset(
    "channel_join channel_leave channel_topic channel_purpose channel_name channel_archive "
    "channel_unarchive group_join group_leave group_topic group_purpose group_name group_archive "
    "group_unarchive pinned_item unpinned_item tombstone".split()
)


# -- HTTP: slack_sdk through the address guard, with slack_sdk's retry handlers -----------------


class _ScaledJitter(Jitter):
    """Up to a quarter more than the backoff (none when the backoff is 0), at most ``MAX_BACKOFF_S``."""

    def recalculate(self, duration: float) -> float:
        return min(duration * (1 + random.random() / 4), MAX_BACKOFF_S)


class _RateLimitRetry(RateLimitErrorRetryHandler):
    """A 429 waits the ``Retry-After`` Slack asks (seconds, possibly fractional); one asking for
    more than ``MAX_RETRY_AFTER_S`` is not retried (the call fails, the next sync resumes)."""

    @staticmethod
    def _wait(response) -> float:
        values = {name.lower(): value for name, value in (response.headers or {}).items()}.get("retry-after", ["1"])
        try:
            return max(float(values[0] if isinstance(values, list) else values), 0.0)
        except ValueError:
            return 1.0

    def _can_retry(self, *, state, request, response=None, error=None) -> bool:
        return super()._can_retry(state=state, request=request, response=response, error=error) and (
            retry_caps().waits_for(self._wait(response))
        )

    def prepare_for_next_attempt(self, *, state, request, response=None, error=None) -> None:
        state.next_attempt_requested = True
        time.sleep(self._wait(response))
        state.increment_current_attempt()


class _ServerErrorRetry(ServerErrorRetryHandler):
    """Retries the 5xx answers ``knowledge.connectors.http`` retries (500, 502, 503, 504)."""

    def _can_retry(self, *, state, request, response=None, error=None) -> bool:
        return response is not None and response.status_code in RETRY_STATUSES and response.status_code != 429


def retry_handlers() -> list:
    """slack_sdk retry handlers for ``KB_CONNECTOR_RETRIES`` retries: rate limits (``Retry-After``),
    5xx answers and dropped connections (backoff ``KB_CONNECTOR_BACKOFF_S`` x 2^n)."""
    caps = retry_caps()
    backoff = BackoffRetryIntervalCalculator(backoff_factor=caps.backoff_s, jitter=_ScaledJitter())
    return [
        _RateLimitRetry(max_retry_count=caps.retries),
        _ServerErrorRetry(max_retry_count=caps.retries, interval_calculator=backoff),
        ConnectionErrorRetryHandler(max_retry_count=caps.retries, interval_calculator=backoff),
    ]


class GuardedWebClient(WebClient):
    """slack_sdk's ``WebClient`` whose requests go through a guarded urllib3 pool (``core.outbound``)
    instead of ``urlopen``; never through a proxy. Non-2xx answers are raised as urllib's
    ``HTTPError`` and connection failures as ``URLError``, as ``urlopen`` would, so slack_sdk's retry
    handlers and errors work unchanged."""

    def __init__(self, *, token: str, base_url: str):
        timeout = settings.KB_CONNECTOR_TIMEOUT_S
        super().__init__(token=token, base_url=base_url, timeout=timeout, retry_handlers=retry_handlers())
        self.proxy = None
        self._pool = guarded_pool_manager(timeout=timeout, retries=False, what="Slack's API")

    def _perform_urllib_http_request_internal(self, url: str, req) -> dict:
        if not url.lower().startswith(("http://", "https://")):
            raise SlackRequestError(f"Invalid URL detected: {url}")
        import urllib3

        headers = {name: str(value) for name, value in req.header_items()}
        try:
            response = self._pool.request(
                req.get_method(), url, body=req.data, headers=headers, retries=False, preload_content=False
            )
            try:
                data = response.read(MAX_RESPONSE_BYTES + 1, decode_content=True)
            finally:
                response.release_conn()
        except urllib3.exceptions.HTTPError as exc:
            raise URLError(FETCH_FAILED) from exc
        if len(data) > MAX_RESPONSE_BYTES:
            raise SourceUnreachable(f"Slack's API answered more than {MAX_RESPONSE_BYTES // 2**20} MB to {url}.")
        message = http.client.HTTPMessage()
        for name, value in response.headers.items():
            message[name] = value
        if response.status >= 300:
            raise HTTPError(url, response.status, response.reason or "", message, io.BytesIO(data))
        charset = message.get_content_charset() or "utf-8"
        return {"status": response.status, "headers": message, "body": data.decode(charset, "replace")}


class _Gone(Exception):
    """Slack answered that the channel, thread or person asked for is gone (the error's name)."""


# -- messages as text ---------------------------------------------------------------------------

_ANGLED = re.compile(r"<([^<>\n]*)>")


def ts_time(ts: str) -> datetime:
    """The aware UTC time of a Slack ``ts`` ("1700000000.000100")."""
    return datetime.fromtimestamp(float(ts), UTC)


def is_thread(message: dict) -> bool:
    """Whether a history message starts a thread (not a reply shown in the channel, not noise)."""
    if message.get("subtype") in NOISE_SUBTYPES or not message.get("ts"):
        return False
    return message.get("thread_ts", message["ts"]) == message["ts"]


def activity(message: dict) -> str:
    """The ts of a message's latest activity: itself, its edit, and a thread parent's latest reply."""
    times = (message["ts"], message.get("latest_reply"), (message.get("edited") or {}).get("ts"))
    return max((when for when in times if when), key=float)


def fingerprint(parent: dict) -> str:
    """A thread's version as its parent message tells it: replies, latest reply, parent's edit."""
    edited = (parent.get("edited") or {}).get("ts", "")
    return f"{parent.get('reply_count', 0)}/{parent.get('latest_reply', '')}/{edited}"


class SlackConnector:
    """A Slack workspace's channels as a ``Connector`` (module docstring).

    ``source.options``: ``channels`` (names with or without ``#``, or ids; default: every channel
    the app is in), ``lookback_days`` (how far ``changes`` looks back for replies and edits; 7).
    """

    kind = KIND
    follows_permissions = True

    def __init__(self, source, secret: str):
        self.source = source
        self.location = source.location or "https://slack.com/api/"
        self.client = GuardedWebClient(token=secret, base_url=self.location)
        options = source.options or {}
        wanted = options.get("channels") or []
        wanted = [wanted] if isinstance(wanted, str) else wanted
        self.wanted = {str(name).strip().lstrip("#").lower() for name in wanted if str(name).strip()}
        lookback = options.get("lookback_days", DEFAULT_LOOKBACK_DAYS)
        if isinstance(lookback, bool) or not isinstance(lookback, int | float) or lookback < 0:
            raise InvalidInput(f"lookback_days is 0 or more days, not {lookback!r}.", code="invalid_options")
        self.lookback_s = float(lookback) * 86400
        self._members: dict[str, frozenset[str] | None] = {}

    # -- calls ---------------------------------------------------------------------------------

    def _call(self, method: str, *, gone: frozenset[str] = frozenset(), **params) -> dict:
        """Slack's answer (a dict) to ``method`` with ``params`` (``None`` values left out).

        ``CredentialRejected`` when the token is refused, ``SourceUnreachable`` when Slack cannot be
        reached or answers an error, ``_Gone`` for an error in ``gone``.
        """
        params = {name: value for name, value in params.items() if value is not None}
        try:
            return getattr(self.client, method.replace(".", "_"))(**params).data
        except SlackApiError as exc:
            data = exc.response.data if isinstance(exc.response.data, dict) else {}
            raise self._error(method, exc.response.status_code, data, gone) from exc
        except URLError as exc:
            raise SourceUnreachable(f"Slack's API at {self.location} could not be reached ({exc.reason}).") from exc
        except AddressNotAllowed as exc:
            raise SourceUnreachable(
                f"Slack's API at {self.location} is at an address that is not allowed ({exc.message}); an operator "
                "can open an intranet range with KB_FETCH_ALLOWED_NETWORKS.",
                code=exc.code,
            ) from exc

    def _error(self, method: str, status: int, data: dict, gone: frozenset[str]) -> Exception:
        """The exception for Slack's answer ``data`` with HTTP ``status`` to ``method`` (``_call``)."""
        error = str(data.get("error") or "")
        status_raise(status, what=f"Slack's {method}", detail=error)
        if status != 200:
            return SourceUnreachable(
                f"Slack's API at {self.location} answered HTTP {status} to {method}: is the location the API's "
                "base URL (https://slack.com/api/ for Slack's cloud)?"
            )
        if error in CREDENTIAL_ERRORS:
            needed = f" (it needs the scope {data['needed']})" if data.get("needed") else ""
            return CredentialRejected(
                f"Slack refused the source's token on {method}: {error}{needed}. The token was revoked, has "
                "expired or lacks a scope; nothing was changed. Give the source a new token (docs/connectors.md "
                "lists the scopes)."
            )
        return (
            _Gone(error)
            if error in gone
            else SourceUnreachable(f"Slack answered {method} with the error {error or 'unknown'!r}.")
        )

    def _pages(self, method: str, field: str, **params) -> Iterator[dict]:
        """Every element of ``field`` over the pages of ``method`` (``response_metadata.next_cursor``)."""
        cursor = None
        while True:
            data = self._call(method, cursor=cursor, **params)
            yield from data.get(field) or []
            cursor = (data.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                return

    # -- what the workspace holds --------------------------------------------------------------

    @cached_property
    def workspace(self) -> dict:
        """``auth.test``'s answer: the workspace's ``url`` and ``team`` name (once per run)."""
        return self._call("auth.test")

    @cached_property
    def joined(self) -> list[dict]:
        """Every channel the app is a member of (``conversations.list``, once per run)."""
        found = self._pages("conversations.list", "channels", types="public_channel,private_channel", limit=LIST_PAGE)
        return [channel for channel in found if channel.get("is_member")]

    @cached_property
    def channels(self) -> dict[str, dict]:
        """The channels read, by id: those the app is a member of, limited by ``options["channels"]``."""
        return {
            channel["id"]: channel
            for channel in self.joined
            if not self.wanted or {channel["id"].lower(), channel.get("name", "").lower()} & self.wanted
        }

    @cached_property
    def users(self) -> dict[str, dict | None]:
        """The workspace's people by id (``users.list``, once per run); ``None`` for an id unknown."""
        return {user["id"]: user for user in self._pages("users.list", "members", limit=PEOPLE_PAGE)}

    def _user(self, user_id: str) -> dict | None:
        """A person by id: from ``users.list``, else ``users.info`` (someone from another workspace)."""
        users = self.users
        if user_id not in users:
            try:
                users[user_id] = self._call("users.info", user=user_id, gone=frozenset({"user_not_found"}))["user"]
            except _Gone:
                users[user_id] = None
        return users[user_id]

    def members(self, channel_id: str) -> frozenset[str] | None:
        """The e-mails of a channel's members (people without one, or deactivated, left out);
        ``None`` when Slack will not list its members."""
        if channel_id not in self._members:
            pages = self._pages(
                "conversations.members", "members", channel=channel_id, limit=LIST_PAGE, gone=MEMBER_ERRORS
            )
            try:
                ids = list(pages)
            except _Gone as exc:
                logger.warning("Slack did not list the members of %s (%s): its threads fail closed.", channel_id, exc)
                self._members[channel_id] = None
                return None
            people = (self._user(user_id) for user_id in ids)
            self._members[channel_id] = frozenset(
                person["profile"]["email"].strip().lower()
                for person in people
                if person and not person.get("deleted") and (person.get("profile") or {}).get("email")
            )
        return self._members[channel_id]

    def permission(self, channel: dict) -> Permission | None:
        """Who may see a channel's threads: everyone (public), its members' group, or nobody (None)."""
        if not channel.get("is_private"):
            return PUBLIC
        return None if self.members(channel["id"]) is None else Permission.of(groups=[channel["id"]])

    def _history(self, channel_id: str, *, oldest: str | None = None) -> Iterator[dict]:
        """The channel's thread parents after ``oldest`` (all when None), newest first."""
        pages = self._pages("conversations.history", "messages", channel=channel_id, oldest=oldest, limit=HISTORY_PAGE)
        return (message for message in pages if is_thread(message))

    # -- documents -----------------------------------------------------------------------------

    def _name(self, user_id: str) -> str:
        """A person's full name (else display name, user name, or the id when Slack does not know it)."""
        person = self._user(user_id) or {"name": user_id}
        profile = person.get("profile") or {}
        return profile.get("real_name") or person.get("real_name") or profile.get("display_name") or person["name"]

    def _author(self, message: dict) -> str:
        if message.get("user"):
            return self._name(message["user"])
        return (message.get("bot_profile") or {}).get("name") or message.get("username") or "someone"

    def _plain(self, text: str) -> str:
        """Slack's message markup as plain text: mentions by name, links as "label (url)"."""

        def spell(match: re.Match) -> str:
            inner, _, label = match.group(1).partition("|")
            if inner.startswith("@"):
                return "@" + (label or self._name(inner[1:]))
            if inner.startswith("#"):
                channel = self.channels.get(inner[1:])
                return "#" + (label or (channel or {}).get("name", inner[1:]))
            if inner.startswith("!"):
                return label or "@" + inner[1:].split("^")[0]
            return f"{label} ({inner})" if label and label != inner else inner

        text = _ANGLED.sub(spell, text or "")
        return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")

    def _message_text(self, message: dict) -> str:
        edited = " (edited)" if message.get("edited") else ""
        when = ts_time(message["ts"]).strftime("%Y-%m-%d %H:%M UTC")
        lines = [f"{self._author(message)}, {when}{edited}:", self._plain(message.get("text", ""))]
        for attachment in message.get("attachments") or []:
            lines.append(self._plain(attachment.get("text") or attachment.get("fallback") or ""))
        for shared in message.get("files") or []:
            lines.append(f"[file: {shared.get('name') or shared.get('title') or shared.get('id')}]")
        return "\n".join(line for line in lines if line)

    def thread_document(self, channel: dict, thread: list[dict]) -> ReadDocument:
        """The ``ReadDocument`` of a thread: its parent message, then its replies under "Replies"."""
        parent, replies = thread[0], thread[1:]
        parts = [self._message_text(parent)]
        if replies:
            parts.append("## Replies")
            parts.extend(self._message_text(reply) for reply in replies)
        text = normalize_text("\n\n".join(parts))
        first = normalize_text(self._plain(parent.get("text", ""))).split("\n", 1)[0]
        first = first if len(first) <= 80 else first[:79].rstrip() + "…"
        place = f"#{channel.get('name') or channel['id']}"
        updated = ts_time(max((activity(message) for message in thread), key=float))
        workspace = (self.workspace.get("url") or "").rstrip("/")
        link = f"{workspace}/archives/{channel['id']}/p{parent['ts'].replace('.', '')}"
        author = self._author(parent)
        return ReadDocument(
            external_id=f"{KIND}/{channel['id']}/{parent['ts']}",
            title=f"{place}: {first or 'message by ' + author}",
            text=text,
            uri=link if workspace else "",
            published_at=updated,
            metadata={"author": author, "place": place, "updated_at": updated.isoformat(), "source_kind": KIND},
            sections=locate_sections(text, ["Replies"], whole_lines=True) if replies else [],
        )

    def _thread_item(self, channel: dict, ts: str, parent: dict | None = None) -> Item:
        """The ``Item`` of the thread at ``ts``: from ``parent`` alone when it has no replies, else
        read with ``conversations.replies``; ``deleted`` when it is gone."""
        key = f"{channel['id']}/{ts}"
        if parent is not None and not parent.get("reply_count"):
            thread = [parent]
        else:
            replies = self._pages(
                "conversations.replies", "messages", channel=channel["id"], ts=ts, limit=LIST_PAGE, gone=GONE_ERRORS
            )
            try:
                thread = list(replies)
            except _Gone:
                return Item(key, deleted=True)
            if not thread or not is_thread(thread[0]) or thread[0]["ts"] != ts:
                return Item(key, deleted=True)
        return Item(
            key,
            fingerprint=fingerprint(thread[0]),
            documents=[self.thread_document(channel, thread)],
            permission=self.permission(channel),
        )

    # -- the Connector protocol ----------------------------------------------------------

    def check(self) -> str:
        """What the token sees: "Acme: 12 channels the app is in (3 private), 1,204 people"."""
        team = self.workspace.get("team") or "Slack"
        channels = self.channels
        private = sum(1 for channel in channels.values() if channel.get("is_private"))
        people = sum(1 for user in self.users.values() if user and not user.get("deleted") and not user.get("is_bot"))
        what = "selected channels the app is in" if self.wanted else "channels the app is in"
        line = f"{team}: {len(channels)} {what} ({private} private), {people:,} people"
        known = {name.lower() for channel in self.joined for name in (channel["id"], channel.get("name", ""))}
        missing = sorted(self.wanted - known)
        if missing:
            line += "; not found, or the app is not in them: " + ", ".join(f"#{name}" for name in missing)
        return line

    def changes(self, checkpoint: dict) -> Iterator[Item]:
        """The threads with activity since ``checkpoint`` (``{"channels": {id: ts of the latest activity
        stored}}``; all when ``{}``), by channel, oldest activity first: new threads, and new replies
        or edited first messages in threads started ``lookback_days`` before the checkpoint's latest
        activity (a channel quiet since before then asks only for its new threads)."""
        seen = dict((checkpoint or {}).get("channels") or {})
        latest = max((float(mark) for mark in seen.values()), default=0.0)
        for channel in list(self.channels.values()):
            mark = seen.get(channel["id"])
            oldest = None if mark is None else f"{min(float(mark), latest - self.lookback_s):.6f}"
            since = -1.0 if mark is None else float(mark)
            try:
                parents = [p for p in self._history(channel["id"], oldest=oldest) if float(activity(p)) > since]
            except _Gone:
                continue
            for parent in sorted(parents, key=lambda message: float(activity(message))):
                seen[channel["id"]] = activity(parent)
                item = self._thread_item(channel, parent["ts"], parent)
                item.checkpoint = {"channels": dict(seen)}
                yield item

    def listing(self) -> Iterator[tuple[str, str]]:
        """``(channel id/ts, fingerprint)`` of every thread of the channels read."""
        for channel in list(self.channels.values()):
            for parent in self._history(channel["id"]):
                yield f"{channel['id']}/{parent['ts']}", fingerprint(parent)

    def fetch(self, keys: list[str]) -> Iterator[Item]:
        """Each thread of ``keys`` read again (``deleted`` when it, or its channel, is gone)."""
        channels = self.channels
        for key in keys:
            channel_id, _, ts = key.partition("/")
            channel = channels.get(channel_id)
            yield Item(key, deleted=True) if channel is None or not ts else self._thread_item(channel, ts)

    def permissions(self, keys: list[str]) -> Iterator[tuple[str, Permission | None]]:
        """Each key's permission: its channel's (``None`` for a channel no longer read)."""
        channels = self.channels
        for key in keys:
            channel = channels.get(key.partition("/")[0])
            yield key, (self.permission(channel) if channel else None)

    def groups(self) -> Iterator[SourceGroup]:
        """A group per private channel read whose members can be listed: ``slack:#name``."""
        for channel in list(self.channels.values()):
            if channel.get("is_private"):
                emails = self.members(channel["id"])
                if emails is not None:
                    yield SourceGroup(channel["id"], f"{KIND}:#{channel.get('name') or channel['id']}", emails)
