"""The engine's services: notices, replay, diffs, edits, forecasts and worktrees; never textual."""
