"""The code verifier (method §2.1): :class:`CodeVerifier` runs a completion's Python against the row's tests in the
sandbox (:mod:`trl_loo_gspo.sandbox`) and scores it (:mod:`.verifier`); :mod:`.assert_split`, :mod:`.plain_data`
and :mod:`.entry_judge` keep the expected values on the host; :mod:`.spans` makes its span signals and
:mod:`.hacks` its static reward-hacking detectors."""

from .verifier import CodeVerifier, code_bounds, extract_code

__all__ = ["CodeVerifier", "code_bounds", "extract_code"]
