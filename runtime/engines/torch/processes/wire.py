"""Point-to-point messages between stage processes over ``torch.distributed``.

A :class:`Link` is one direction between two ranks on a process group of its own, so every
link is a FIFO that exactly one thread sends on and one thread receives on (gloo keeps the
order of sends on a pair; separate groups keep links from interleaving). Two kinds of payload:

- objects (commands, replies, chunk descriptors): pickled into a fixed 1 KiB frame, with a
  second frame for whatever does not fit - one send for almost every control message;
- tensors (activations): sent as they are, after a descriptor that carries shape and dtype.

With CUDA the tensor group is NCCL and the object group stays gloo (NCCL moves device memory only).
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

FRAME = 1024                      # bytes of the first frame of an object message
KEEPALIVE = "keepalive"           # a message a link's receiver skips (leader.py: idle links would time out)
_HEAD = struct.Struct("<q")      # payload length


@dataclass(slots=True)
class Link:
    """One direction ``src -> dst``; ``objects`` (gloo) carries pickles, ``tensors`` activations."""

    src: int
    dst: int
    objects: Any                  # a torch.distributed process group
    tensors: Any

    @staticmethod
    def encode(obj: Any) -> bytes:
        """An object message as it travels (a pickle): whoever encodes it sees a pickling error."""
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    def send_obj(self, obj: Any) -> None:
        self.send_encoded(self.encode(obj))

    def send_encoded(self, payload: bytes) -> None:
        first = bytearray(FRAME)
        _HEAD.pack_into(first, 0, len(payload))
        room = FRAME - _HEAD.size
        first[_HEAD.size:_HEAD.size + min(room, len(payload))] = payload[:room]
        dist.send(torch.frombuffer(first, dtype=torch.uint8), self.dst, group=self.objects)
        if len(payload) > room:
            dist.send(torch.frombuffer(bytearray(payload[room:]), dtype=torch.uint8), self.dst, group=self.objects)

    def recv_obj(self) -> Any:
        first = torch.empty(FRAME, dtype=torch.uint8)
        dist.recv(first, self.src, group=self.objects)
        raw = first.numpy().tobytes()
        (n,) = _HEAD.unpack_from(raw, 0)
        room = FRAME - _HEAD.size
        if n <= room:
            return pickle.loads(raw[_HEAD.size:_HEAD.size + n])
        rest = torch.empty(n - room, dtype=torch.uint8)
        dist.recv(rest, self.src, group=self.objects)
        return pickle.loads(raw[_HEAD.size:] + rest.numpy().tobytes())

    def send_tensor(self, meta: Any, t: Tensor) -> None:
        """``meta`` travels with the tensor (the chunk descriptors of an activation packet)."""
        t = t.contiguous()
        self.send_obj((meta, tuple(t.shape), str(t.dtype).removeprefix("torch.")))
        if t.numel():
            dist.send(t, self.dst, group=self.tensors)

    def recv_tensor(self, device: torch.device) -> tuple[Any, Tensor | None]:
        """``(meta, tensor)``; ``(None, None)`` is the end of the link (see :meth:`close`). Keepalives
        are skipped."""
        head = self.recv_obj()
        while head == KEEPALIVE:
            head = self.recv_obj()
        if head is None:
            return None, None
        meta, shape, dtype = head
        t = torch.empty(shape, dtype=getattr(torch, dtype), device=device)
        if t.numel():
            dist.recv(t, self.src, group=self.tensors)
        return meta, t

    def close(self) -> None:
        """Tell the receiving thread to stop."""
        self.send_obj(None)

    def keepalive(self) -> None:
        """A message the receiver skips: an idle link hears something before gloo's timeout."""
        self.send_obj(KEEPALIVE)
