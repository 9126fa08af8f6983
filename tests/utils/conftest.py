from __future__ import annotations

from tests.lookupd.conftest import make_lookupd  # noqa: F401  (the fixture, for the lookupd tests here)
from tests.utils.helpers import utils  # noqa: F401
