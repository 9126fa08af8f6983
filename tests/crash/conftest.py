from __future__ import annotations


def pytest_addoption(parser):
    parser.addoption("--crash-rounds", type=int, default=0,
                     help="rounds of the crash suite (default: the CI-sized run)")
