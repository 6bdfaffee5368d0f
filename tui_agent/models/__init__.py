"""Model providers (the offline scripted one, and Claude through the anthropic SDK) and the price table
that turns usage into cost."""

from .anthropic import as_message
from .pricing import PRICES_DATE, PRICES_SOURCE, cost_usd
from .provider import Provider, Unresolved, kept_replies, provider_for
from .scripted import ScriptedProvider
from .tokens import estimate_prompt_tokens

__all__ = ["PRICES_DATE", "PRICES_SOURCE", "Provider", "ScriptedProvider", "Unresolved", "as_message",
           "cost_usd", "estimate_prompt_tokens", "kept_replies", "provider_for"]
