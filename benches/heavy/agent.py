"""The bundled reference agent sending a real agent's traffic (for
`cargo bench --bench memory`): every chat request carries a 48 KB system
prompt and 400 earlier messages of 2.5 KB (about 1 MB, as Continue CLI or
Claude Code resend their whole history every call), and each request is
logged with 100 KB of stderr and 20 KB of stdout. Otherwise it is
examples/reference/agent.py, loaded as a module."""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "..", "..", "examples", "reference", "agent.py")

spec = importlib.util.spec_from_file_location("refagent", REF)
agent = importlib.util.module_from_spec(spec)
spec.loader.exec_module(agent)

SYSTEM = agent.SYSTEM_PROMPT + "\nRules: " + "be careful and thorough. " * 2000
HISTORY = [{"role": "user" if i % 2 == 0 else "assistant",
            "content": f"earlier turn {i}: " + "h" * 2500} for i in range(400)]
plain = agent.Agent.request_messages


def heavy(self):
    out = plain(self)
    sys.stderr.write(("debug: building request " + "d" * 200 + "\n") * 450)
    sys.stdout.write(("progress: thinking " + "p" * 80 + "\n") * 200)
    return [{"role": "system", "content": SYSTEM + out[0]["content"]}] + HISTORY + out[1:]


agent.Agent.request_messages = heavy

if __name__ == "__main__":
    sys.exit(agent.main(sys.argv[1:]))
