"""A Gradio chatbot that remembers the conversation (NuNet's example, as a service job).

It listens on 127.0.0.1:$CHAT_PORT inside the job (no network: the owner reaches it with
`nunet-tui job forward JOB_ID 7860`). Every turn is appended to the conversation, which is
saved to outputs/conversation.json after each message and read back at start, so a chat that
is resumed goes on where it was. The bot is deliberately small (it remembers your name and
what you told it, and says how long you have talked); swap ``reply`` for a model of your own.
"""

import json
import os
import pathlib
import re
import signal
import sys

PORT = int(os.environ.get("CHAT_PORT", "7860"))
SAVED = pathlib.Path("outputs") / "conversation.json"


def load() -> list[dict[str, str]]:
    """The conversation so far (empty when there is none, or it cannot be read)."""
    try:
        turns = json.loads(SAVED.read_text())
    except (OSError, ValueError):
        return []
    return [t for t in turns if isinstance(t, dict) and {"role", "content"} <= t.keys()]


def save(turns: list[dict[str, str]]) -> None:
    SAVED.parent.mkdir(exist_ok=True)
    partial = SAVED.with_suffix(".part")
    partial.write_text(json.dumps(turns, indent=1))
    partial.replace(SAVED)  # a stop mid-write never leaves half a file


def reply(message: str, turns: list[dict[str, str]]) -> str:
    """The bot's answer to ``message``, knowing every earlier turn."""
    said = [t["content"] for t in turns if t["role"] == "user"]
    names = [m.group(1) for text in said if (m := re.search(r"my name is (\w+)", text, re.I))]
    text = message.strip()
    if m := re.search(r"my name is (\w+)", text, re.I):
        return f"Nice to meet you, {m.group(1)}. I will remember that."
    if re.search(r"what('?s| is) my name", text, re.I):
        return f"You are {names[-1]}." if names else "You have not told me your name yet."
    if re.search(r"what did i (say|tell you)", text, re.I):
        return f"You first said: {said[0]!r}" if said else "Nothing yet: this is our start."
    who = f", {names[-1]}" if names else ""
    return f"You said {text!r}{who}. That is message {len(said) + 1} of our chat."


def main() -> int:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no network in a job
    import gradio as gr

    turns = load()
    print(f"conversation of {len(turns)} turns loaded from {SAVED}", flush=True)

    def respond(message: str, history: object) -> str:
        answer = reply(message, turns)
        turns.extend(
            ({"role": "user", "content": message}, {"role": "assistant", "content": answer})
        )
        save(turns)
        return answer

    demo = gr.ChatInterface(respond, title="A chatbot on NuNet", chatbot=gr.Chatbot(value=turns))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `job stop`: saved already
    print(f"serving on 127.0.0.1:{PORT}", flush=True)
    demo.launch(server_name="127.0.0.1", server_port=PORT, share=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
