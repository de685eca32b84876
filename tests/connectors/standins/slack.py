"""A local stand-in for Slack's Web API, written from Slack's method reference
(https://api.slack.com/methods), for the real ``slack_sdk`` client.

What it answers, as Slack does: ``{"ok": true, ...}`` with HTTP 200, or ``{"ok": false, "error":
"..."}`` (also HTTP 200; ``invalid_auth``, or ``token_revoked`` once ``revoke()``d); cursor
pagination with ``limit`` and ``response_metadata.next_cursor`` (opaque base64); 429 with
``Retry-After`` through ``fail_next``. Methods: ``auth.test``, ``conversations.list`` (``types``,
``exclude_archived``; private channels only where the app is a member, as for a bot token),
``conversations.history`` (thread parents newest first, ``oldest``/``latest``/``inclusive``,
``has_more``), ``conversations.replies`` (the parent, then its replies oldest first),
``conversations.members``, ``users.list`` and ``users.info``; by POST (what slack_sdk sends, form
encoded) or GET.

State is plain Python, kept sorted (``bisect``) so that 10,000 messages in 20 channels load and
page fast: ``add_user``, ``add_channel``, ``post`` (a reply with ``thread=``), ``edit``, ``advance``,
``delete`` (a parent takes its thread with it), ``remove_member``, ``leave``, ``make_private``,
``refuse_members`` and ``fill`` (many channels and messages at once).
"""

from __future__ import annotations

import base64
import bisect
import copy

from tests.connectors.standin import Request, StandIn, route

# Messages' ts start here (2023-11-14 22:13:20 UTC) and grow by a second each.
EPOCH = 1_700_000_000


def _key(ts: str) -> tuple[int, int]:
    """A ``ts`` ("1700000000.000100", or "0", or "1700000000.5") as a sortable pair."""
    seconds, _, fraction = str(ts).partition(".")
    return int(seconds or 0), int((fraction + "000000")[:6])


def _cursor(value) -> str:
    return base64.b64encode(f"next:{value}".encode()).decode()


def _uncursor(cursor: str | None) -> str | None:
    if not cursor:
        return None
    return base64.b64decode(cursor).decode().partition(":")[2]


def api(method: str):
    """A route for Slack Web API method ``method`` (POST; ``_add_get_twins`` adds the GET)."""
    return route("POST", "/" + method.replace(".", r"\."))


def _ok(**fields):
    return 200, {"ok": True, **fields}


def _error(error: str):
    return 200, {"ok": False, "error": error}


def _limit(request: Request, default: int, maximum: int) -> int:
    value = int(request.arg("limit") or 0)
    return min(value, maximum) if value > 0 else default


class _Channel:
    """A channel: its description and its thread parents' ts, sorted (with their sort keys)."""

    def __init__(self, info: dict, members: list[str]):
        self.info, self.members = info, members
        self.keys: list[tuple[int, int]] = []
        self.order: list[str] = []
        self.messages: dict[str, dict] = {}  # parents by ts
        self.replies: dict[str, list[dict]] = {}  # a parent's ts -> its replies, oldest first
        self.refused = False


class SlackStandIn(StandIn):
    token = "xoxb-standin-token"
    team = "Acme"
    domain = "acme"

    def __init__(self):
        super().__init__()
        self.users: dict[str, dict] = {}
        self.places: dict[str, _Channel] = {}
        self._tick = 0
        self._offset = 0

    # -- what tests change -------------------------------------------------------------------------

    def now(self) -> str:
        """A fresh ts, later than every one before."""
        self._tick += 1
        return f"{EPOCH + self._offset + self._tick}.{self._tick % 1_000_000:06d}"

    def advance(self, *, days: float) -> None:
        """Let ``days`` pass before the next message or edit."""
        self._offset += int(days * 86400)

    def add_user(self, user_id: str, name: str, email: str | None = None, *, bot=False, deleted=False) -> dict:
        profile = {"real_name": name, "display_name": name.split()[0].lower(), "email": email}
        user = {
            "id": user_id,
            "team_id": "T0STANDIN",
            "name": name.split()[0].lower(),
            "real_name": name,
            "deleted": deleted,
            "is_bot": bot,
            "profile": {k: v for k, v in profile.items() if v is not None},
        }
        self.users[user_id] = user
        return user

    def add_channel(self, channel_id: str, name: str, *, private=False, member=True, members=(), archived=False):
        info = {
            "id": channel_id,
            "name": name,
            "is_channel": not private,
            "is_group": private,
            "is_private": private,
            "is_archived": archived,
            "is_member": member,
            "created": EPOCH,
            "topic": {"value": ""},
            "purpose": {"value": ""},
        }
        self.places[channel_id] = _Channel(info, list(members))

    def post(self, channel_id: str, user: str, text: str, *, thread: str | None = None, **extra) -> str:
        """Post a message (a reply to the thread at ``thread``); its ts."""
        channel = self.places[channel_id]
        ts = self.now()
        message = {"type": "message", "user": user, "text": text, "ts": ts, "team": "T0STANDIN", **extra}
        if thread is None:
            channel.keys.append(_key(ts))  # ts only grow: the lists stay sorted
            channel.order.append(ts)
            channel.messages[ts] = message
            return ts
        if thread not in channel.messages:
            raise KeyError(f"no thread at {thread}")
        message["thread_ts"] = thread
        channel.replies.setdefault(thread, []).append(message)
        self._thread_fields(channel, thread)
        return ts

    def edit(self, channel_id: str, ts: str, text: str) -> None:
        message = self._find(self.places[channel_id], ts)
        message["text"] = text
        message["edited"] = {"user": message.get("user"), "ts": self.now()}

    def delete(self, channel_id: str, ts: str) -> None:
        """Delete a message: a thread's parent takes its replies with it."""
        channel = self.places[channel_id]
        if ts in channel.messages:
            index = bisect.bisect_left(channel.keys, _key(ts))
            del channel.keys[index], channel.order[index]
            del channel.messages[ts]
            channel.replies.pop(ts, None)
            return
        message = self._find(channel, ts)
        replies = channel.replies[message["thread_ts"]]
        replies.remove(message)
        self._thread_fields(channel, message["thread_ts"])

    def remove_member(self, channel_id: str, user_id: str) -> None:
        self.places[channel_id].members.remove(user_id)

    def leave(self, channel_id: str) -> None:
        """The app leaves the channel (it is no longer a member)."""
        self.places[channel_id].info["is_member"] = False

    def make_private(self, channel_id: str) -> None:
        self.places[channel_id].info.update(is_private=True, is_channel=False, is_group=True)

    def refuse_members(self, channel_id: str) -> None:
        """``conversations.members`` answers ``fetch_members_failed`` for this channel."""
        self.places[channel_id].refused = True

    def fill(self, *, channels: int = 20, messages: int = 10_000, users: int = 50, private_every: int = 4) -> None:
        """``channels`` channels (one in ``private_every`` private) with ``messages`` messages in
        all, a reply every tenth message, written by ``users`` people."""
        people = [f"UF{n:05d}" for n in range(users)]
        for n, user_id in enumerate(people):
            self.add_user(user_id, f"Person {n}", f"person{n}@example.com")
        ids = [f"CF{n:05d}" for n in range(channels)]
        for n, channel_id in enumerate(ids):
            self.add_channel(channel_id, f"channel-{n}", private=n % private_every == 1, members=people[: 5 + n])
        last: dict[str, str] = {}
        for n in range(messages):
            channel_id = ids[n % channels]
            text = f"Message {n} about topic {n % 97} in channel {n % channels}."
            if (n // channels) % 10 == 9 and channel_id in last:
                self.post(channel_id, people[n % users], text, thread=last[channel_id])
            else:
                last[channel_id] = self.post(channel_id, people[n % users], text)

    def permalink(self, channel_id: str, ts: str) -> str:
        return f"https://{self.domain}.slack.com/archives/{channel_id}/p{ts.replace('.', '')}"

    # -- helpers -----------------------------------------------------------------------------------

    @staticmethod
    def _find(channel: _Channel, ts: str) -> dict:
        if ts in channel.messages:
            return channel.messages[ts]
        for replies in channel.replies.values():
            for reply in replies:
                if reply["ts"] == ts:
                    return reply
        raise KeyError(ts)

    @staticmethod
    def _thread_fields(channel: _Channel, thread: str) -> None:
        parent, replies = channel.messages[thread], channel.replies.get(thread) or []
        for field in ("thread_ts", "reply_count", "reply_users_count", "latest_reply", "reply_users"):
            parent.pop(field, None)
        if replies:
            users = sorted({reply["user"] for reply in replies})
            parent.update(
                thread_ts=thread,
                reply_count=len(replies),
                reply_users_count=len(users),
                latest_reply=replies[-1]["ts"],
                reply_users=users,
            )

    def _readable(self, request: Request):
        """The channel a request names, or Slack's error for it."""
        channel = self.places.get(request.arg("channel") or "")
        if channel is None or (channel.info["is_private"] and not channel.info["is_member"]):
            return None, _error("channel_not_found")
        if not channel.info["is_member"]:
            return None, _error("not_in_channel")
        return channel, None

    @staticmethod
    def _page(items: list, request: Request, field: str, *, default: int, maximum: int, **fields):
        """An offset-paged answer: ``items[start:start + limit]`` and the next cursor."""
        start = int(_uncursor(request.arg("cursor")) or 0)
        end = start + _limit(request, default, maximum)
        more = _cursor(end) if end < len(items) else ""
        return _ok(**{field: items[start:end]}, **fields, response_metadata={"next_cursor": more})

    # -- the stand-in's side -------------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        header = request.headers.get("Authorization", "")
        return header == f"Bearer {self.token}" or request.arg("token") == self.token

    def unauthorized(self, request: Request):
        return _error("token_revoked" if self.revoked else "invalid_auth")

    def not_found(self, request: Request):
        return 404, {"ok": False, "error": "unknown_method"}

    @api("auth.test")
    def auth_test(self, request: Request):
        return _ok(
            url=f"https://{self.domain}.slack.com/",
            team=self.team,
            user="knowledge-base",
            team_id="T0STANDIN",
            user_id="U0BOT",
            bot_id="B0BOT",
            is_enterprise_install=False,
        )

    @api("conversations.list")
    def conversations_list(self, request: Request):
        types = set((request.arg("types") or "public_channel").split(","))
        skip_archived = (request.arg("exclude_archived") or "") in ("1", "true")
        channels = [
            dict(channel.info, num_members=len(channel.members))
            for channel in self.places.values()
            if (channel.info["is_private"] and "private_channel" in types and channel.info["is_member"])
            or (not channel.info["is_private"] and "public_channel" in types)
            if not (skip_archived and channel.info["is_archived"])
        ]
        return self._page(channels, request, "channels", default=100, maximum=1000)

    @api("conversations.history")
    def conversations_history(self, request: Request):
        channel, error = self._readable(request)
        if error:
            return error
        inclusive = (request.arg("inclusive") or "") in ("1", "true")
        oldest, latest = _key(request.arg("oldest") or "0"), request.arg("latest")
        low = (bisect.bisect_left if inclusive else bisect.bisect_right)(channel.keys, oldest)
        high = len(channel.keys)
        if latest:
            high = (bisect.bisect_right if inclusive else bisect.bisect_left)(channel.keys, _key(latest))
        before = _uncursor(request.arg("cursor"))
        if before:
            high = min(high, bisect.bisect_left(channel.keys, _key(before)))
        start = max(low, high - _limit(request, 100, 999))
        page = [copy.deepcopy(channel.messages[ts]) for ts in reversed(channel.order[start:high])]
        more = start > low
        return _ok(
            messages=page,
            has_more=more,
            pin_count=0,
            response_metadata={"next_cursor": _cursor(channel.order[start]) if more else ""},
        )

    @api("conversations.replies")
    def conversations_replies(self, request: Request):
        channel, error = self._readable(request)
        if error:
            return error
        ts = request.arg("ts") or ""
        if ts not in channel.messages:
            try:
                ts = self._find(channel, ts)["thread_ts"]
            except KeyError:
                return _error("thread_not_found")
        thread = [channel.messages[ts], *channel.replies.get(ts, [])]
        answer = self._page(copy.deepcopy(thread), request, "messages", default=1000, maximum=1000)
        answer[1]["has_more"] = bool(answer[1]["response_metadata"]["next_cursor"])
        return answer

    @api("conversations.members")
    def conversations_members(self, request: Request):
        channel, error = self._readable(request)
        if error:
            return error
        if channel.refused:
            return _error("fetch_members_failed")
        return self._page(channel.members, request, "members", default=100, maximum=1000)

    @api("users.list")
    def users_list(self, request: Request):
        return self._page(list(self.users.values()), request, "members", default=1000, maximum=1000)

    @api("users.info")
    def users_info(self, request: Request):
        user = self.users.get(request.arg("user") or "")
        return _ok(user=user) if user else _error("user_not_found")


def _add_get_twins(cls) -> None:
    """Give every POST route of ``cls`` a GET twin (Slack takes both)."""
    for name, function in list(vars(cls).items()):
        if getattr(function, "route", ("",))[0] == "POST":

            def twin(self, request, *groups, _function=function):
                return _function(self, request, *groups)

            twin.route = ("GET", function.route[1])
            setattr(cls, f"{name}_get", twin)


_add_get_twins(SlackStandIn)
