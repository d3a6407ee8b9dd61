"""`Styled` and `check_style_names` under a module of their own name.

Both are defined in `cadenza.data.tokenizers.base`, beside `Tokenizer.with_styles`, which builds a
`Styled`; that module's docstring describes the style ids.
"""

from cadenza.data.tokenizers.base import Styled, check_style_names

__all__ = ["Styled", "check_style_names"]
