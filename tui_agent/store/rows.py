"""The rows the store's read functions return, typed by column; the schema is store/schema.py."""

from __future__ import annotations

from typing import Any, TypedDict


class RunRow(TypedDict):
    """A `runs` row as `SELECT *` reads it (get_run)."""

    id: str
    agent: str
    agent_version: str | None
    code_version: str | None
    request: str
    run_key: str | None
    budget: str | None
    model: str | None
    status: str
    reason: str | None
    attempt: int
    fence: int
    worker: str | None
    lease_expires_at: float | None
    wake_at: float | None
    generation: int
    parent_id: str | None
    fork_step: int | None
    result: str | None
    result_artifact: str | None
    error: str | None
    artifact_dir: str | None
    created_at: float
    started_at: float | None
    updated_at: float
    finished_at: float | None
    traceback: str | None
    script: str | None
    pruned_at: float | None


class CheckpointRow(TypedDict):
    """A `checkpoints` row: a run's progress and what its budget has used."""

    run_id: str
    generation: int
    schema_version: int
    current_step: int
    total_steps: int | None
    next_input: str | None
    plan_revision: int
    used_steps: int | None
    used_model_calls: int | None
    used_input_tokens: int | None
    used_output_tokens: int | None
    used_cost_usd: float | None
    used_tool_calls: int | None
    used_effects: int | None
    used_wall_s: float | None
    unpriced_calls: int | None
    step_attempts: int | None
    soft_position: int | None
    soft_dimensions: str | None
    updated_at: float | None
    used_cache_read_tokens: int
    used_cache_write_tokens: int


class EffectRow(TypedDict):
    """An `effects` row, one side effect in the ledger, as `SELECT *` reads it."""

    id: int
    run_id: str
    generation: int
    position: int
    name: str
    key: str
    state: str
    attempts: int
    result: str | None
    has_lookup: int | None
    dedupe_ttl_s: float | None
    lookup_ttl_s: float | None
    service: str | None
    done_by: str | None
    first_attempted_at: float | None
    attempted_at: float | None
    attempted_by: str | None
    fence: int | None
    decided_by: str | None
    decided_at: float | None
    note: str | None
    created_at: float
    updated_at: float | None
    waits_for: str | None


class JournalRow(TypedDict):
    """A `journal` row (the view over journal_rows and journal_tail): one recorded entry."""

    run_id: str
    generation: int
    position: int
    name: str
    kind: str
    result: str | None
    artifact: str | None
    attempts: int
    started_at: float | None
    duration_s: float | None
    fence: int
    cost_usd: float | None
    wall_s: float | None
    inputs: str | None
    edited: int | None


class ModelCallRow(TypedDict):
    """A `model_calls` row of the current generation as calls_for reads it: `request` decoded, `state` died
    for an in-flight call no live lease holds."""

    position: int
    call: int
    name: str
    fence: int
    provider: str
    model: str
    state: str
    request: Any
    reserved_input: int
    reserved_output: int
    reserved_usd: float | None
    tokens: int | None
    cost_usd: float | None
    request_id: str | None
    error: str | None
    started_at: float
    updated_at: float
