"""The wire: the unions the control socket decodes, and the helpers that (de)code them."""

from __future__ import annotations

from typing import Any

import msgspec

from engine.api.base import Command, Event
from engine.api.gpus import (
    GetGpuStatus,
    GpuCapabilities,
    GpuDoctor,
    ImagePullProgress,
    PrepareMlImages,
)
from engine.api.jobs import (
    CancelJob,
    DeleteJobResults,
    FetchJobResults,
    GetJob,
    GetJobLogs,
    JobChanged,
    JobLogEvent,
    ListJobs,
    StopJob,
    SubmitJob,
)
from engine.api.network import (
    ChatClear,
    ChatHistory,
    ChatJoin,
    ChatList,
    ChatMessageEvent,
    ChatRequestEvent,
    ChatSend,
    ChatStart,
    GetNetworkStatus,
    ListPeers,
    NetworkChanged,
    PeerChanged,
)
from engine.api.node import (
    CheckOnboarding,
    EngineStopping,
    GetCapacity,
    GetInfo,
    GetPeerSelf,
    ModeChanged,
    Offboard,
    OnboardingChanged,
    OnboardRequest,
    Pause,
    ResourceConfig,
    Resume,
    SetMode,
)
from engine.api.payments import (
    EscrowChanged,
    RewardClaim,
    RewardList,
    RewardRefund,
    SetBlockfrostProjectId,
    UnlockKeystore,
    WalletBalance,
    WalletImport,
    WalletNew,
    WalletShow,
)
from engine.api.tunnels import JobForward, JobForwardClose, JobShell, ListForwards

AnyCommand = (
    GetCapacity
    | OnboardRequest
    | CheckOnboarding
    | ResourceConfig
    | Pause
    | Resume
    | Offboard
    | GetInfo
    | GetPeerSelf
    | SetMode
    | GetGpuStatus
    | GpuDoctor
    | GpuCapabilities
    | PrepareMlImages
    | ListPeers
    | ChatStart
    | ChatList
    | ChatJoin
    | ChatClear
    | ChatSend
    | ChatHistory
    | GetNetworkStatus
    | SubmitJob
    | ListJobs
    | GetJob
    | GetJobLogs
    | CancelJob
    | FetchJobResults
    | JobForward
    | JobForwardClose
    | ListForwards
    | JobShell
    | StopJob
    | DeleteJobResults
    | WalletNew
    | WalletImport
    | WalletShow
    | WalletBalance
    | UnlockKeystore
    | SetBlockfrostProjectId
    | RewardList
    | RewardClaim
    | RewardRefund
)


AnyEvent = (
    JobChanged
    | EscrowChanged
    | JobLogEvent
    | OnboardingChanged
    | ModeChanged
    | EngineStopping
    | ImagePullProgress
    | PeerChanged
    | ChatMessageEvent
    | ChatRequestEvent
    | NetworkChanged
)


def to_builtins(obj: object) -> Any:
    return msgspec.to_builtins(obj)


def decode_command(data: object) -> Command:
    return msgspec.convert(data, AnyCommand)


def decode_reply(command: Command, data: object) -> Any:
    return msgspec.convert(data, command.reply)


def decode_event(data: object) -> Event:
    return msgspec.convert(data, AnyEvent)
