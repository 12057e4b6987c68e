"""Methods as LangGraph graphs, one small folder each (alphaverus, mucode, f2strans, revise).

Each graph takes its backend, sandbox, verifiers and store from the run context and records
every step as a Node in the store.
"""
