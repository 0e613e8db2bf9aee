"""``a`` (consumer): the account; filled in by the next step."""

from __future__ import annotations

from nunet_tui.screens.base import CapabilityScreen


class AccountScreen(CapabilityScreen):
    pass
