"""The engine's services: notices, replay, diffs, edits, forecasts, exports and worktrees; never textual."""
