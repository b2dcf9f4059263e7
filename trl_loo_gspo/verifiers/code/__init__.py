"""The code verifier (method §2.1): :class:`CodeVerifier` runs a completion's Python against the row's tests in the
sandbox (:mod:`trl_loo_gspo.sandbox`: a judge process runs each test, the program runs in a candidate process) and
scores it (:mod:`.verifier`); :mod:`.test_plan` reads which names of a test are the program's, :mod:`.verdicts` the
judges' reports; :mod:`.spans` makes its span signals and :mod:`.hacks` its static reward-hacking detectors."""

from .verifier import CodeVerifier, code_bounds, extract_code

__all__ = ["CodeVerifier", "code_bounds", "extract_code"]
