"""The request layout against a real prompt cache: llama.cpp's ``llama-server`` (runs
where ``PHASEFLOW_LLAMA_SERVER`` names its start script; elsewhere it skips, and
``test_request_layout_cache.py`` checks the same layout from the requests alone).

A few turns of ``benchmarks/bench_cache.py``'s conversation (the model's replies
scripted; in most turns a tool writes state the phase's instructions show) are recorded,
then every request is sent in order through ``OpenAIProvider`` (Chat Completions, the
reply cut at one token: only the prompt is measured), and the tokens the server read
from its cache (``Usage.cached_input_tokens``) are compared with the request before."""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from phaseflow.providers import OpenAIProvider
from phaseflow.providers.protocol import ProviderReply, ProviderRequest
from tests.support.llama_server import LlamaServer, llama_server, tokens
from tests.support.provider_streams import assemble, collect

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_cache

pytest.importorskip("openai")

#: the chat template's tokens around the trailing block (the system turn's start before
#: it, its end and the prompt for the model's reply after it: 7 with SmolLM2's template)
AROUND = 10


@pytest.fixture(scope="module")
def server() -> Iterator[LlamaServer]:
    with llama_server() as running:
        yield running


def _sent(server: LlamaServer, layout: str, turns: int,
          ) -> list[tuple[ProviderRequest, ProviderReply]]:
    recorded = asyncio.run(bench_cache.converse(layout, turns))
    provider = OpenAIProvider("smollm", base_url=server.v1, max_tokens=1,
                              max_tokens_field="max_tokens")
    out = []
    for _, request in recorded.requests:
        reply = assemble(collect(provider, request))
        assert isinstance(reply, ProviderReply), reply
        out.append((request, reply))
    return out


def _covered(server: LlamaServer, previous: tuple[ProviderRequest, ProviderReply],
             current: tuple[ProviderRequest, ProviderReply]) -> bool:
    """Does ``current``'s cached prefix cover ``previous`` up to its trailing block?"""
    request, reply = previous
    before_block = reply.usage.input_tokens - tokens(server, request.context) - AROUND
    return current[1].usage.cached_input_tokens >= before_block


def test_inside_a_phase_the_cache_covers_the_previous_request_up_to_its_block(
        server: LlamaServer) -> None:
    sent = _sent(server, "end", 4)
    same_phase = [(a, b) for a, b in itertools.pairwise(sent)
                  if bench_cache.phase_of(a[0]) == bench_cache.phase_of(b[0])]
    # turns of one phase: after a tool result that wrote state (the block changed), and
    # a turn's first request after the reply before it
    assert len(same_phase) >= 3
    for previous, current in same_phase:
        assert previous[0].context and "Items logged so far" in previous[0].context
        assert _covered(server, previous, current), (previous[1].usage, current[1].usage)
        # only the new messages and the block were prefilled again
        assert current[1].usage.cached_input_tokens > previous[1].usage.cached_input_tokens


def test_in_the_system_layout_a_state_change_leaves_only_the_start_cached(
        server: LlamaServer) -> None:
    # the way back (context_position="system"): the instructions in the system message
    # change with the state, so the request after a tool wrote state reuses only the
    # start of the system text
    sent = _sent(server, "system", 2)
    pairs = list(itertools.pairwise(sent))
    assert not all(_covered(server, a, b) for a, b in pairs)
    first_turn = sent[1][1].usage  # after log_item wrote state, inside the first phase
    assert first_turn.cached_input_tokens < 0.2 * sent[0][1].usage.input_tokens
