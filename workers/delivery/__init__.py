"""The worker's side of one delivery to a host's launcher (docs/launcher.md), under the attempt lifecycle.

``workers.attempt`` says what happens to an attempt, stage by stage; this package says how each stage talks to the
launcher on the host:

- ``client``: the delivery (token, key, marker, folder) and its launcher calls, the launcher sent on stdin;
- ``poll``: the shell one poll runs on the host (the heartbeat, then a wait for the next record);
- ``records``: what the host says, parsed defensively, a record taken only when signed, forged ones kept as evidence;
- ``bundle``: the delivery's files taken back in one read, checked against what the launcher signed;
- ``artifacts``: what of them becomes the attempt's artifacts, under the attempt folder's names.

None of them imports the lifecycle: it hands each what it needs (the launcher's source among them).
"""

from workers.delivery.artifacts import artifacts_of
from workers.delivery.delivered import BUNDLE_LIMIT, Delivered, safe_member
from workers.delivery.client import Delivery
from workers.delivery.poll import POLL_TICK_S, WAKE_LINES, poll_script
from workers.delivery.hostrecords import ENDED_BY, MAX_FORGED, Forged, answer_lines, is_pid, parse_json

__all__ = ["BUNDLE_LIMIT", "Delivered", "Delivery", "ENDED_BY", "Forged", "MAX_FORGED", "POLL_TICK_S", "WAKE_LINES",
           "answer_lines", "artifacts_of", "is_pid", "parse_json", "poll_script", "safe_member"]
