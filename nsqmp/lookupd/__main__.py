"""``python -m nsqmp.lookupd``: the nsqlookupd drop-in (as ``nsqmp-nsqlookupd``)."""
from nsqmp.lookupd.cli import main

main()
