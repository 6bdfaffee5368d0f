"""The engine's services beside the runtime: notices, replay, diffs, edits, forecasts, exports and worktrees, free of textual."""
