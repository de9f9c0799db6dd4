"""The normal (unfaulted) replies of the fake servers (memrl.testing.fault_server): plausible
enough that each benchmark's episodes run through the project's real parsers.

  ALFWorld (memrl_envs/alfworld/prompts.py, ends with "\\n>")  a fixed tour of the room, one command
  memory writer (memrl/memory/writer.py)               a short plan ("Plan:\\n1.") or reflection
  BigCodeBench (memrl_envs/bigcodebench/prompts.py)          a ```python block defining the task's
                                                       entry function (its body is a stub)
  Lifelong OS (memrl_envs/lifelong_os/prompts.py)            "bash" with ```bash ls /```, then "finish"
  Lifelong DB (memrl_envs/lifelong_db/prompts.py)            a SELECT on the task's table, then
                                                       "Answer" / "Final Answer: <its output>"
  HLE solver (memrl_envs/hle/prompts.py)                     Explanation / Exact Answer / Confidence
  HLE judge (memrl_envs/hle/judge.py)                        a one-line JSON verdict, or the four
                                                       "field: value" lines the official rule asks for
  ALFWorld chat dialogue (memrl_envs/alfworld/chat.py)       the tour as "Thought: ... / Action: ..."
  official memory writer (layout=official)             a numbered script or a reflection
  self-judgment (memrl_baselines/judge.py)            "success" or "failure" (half of the prompts
                                                       each), a dash and a reason
  ReasoningBank items (memrl_baselines/reasoningbank.py)  two memory items in its Markdown format
  ExpeL insights (memrl_baselines/expel_insights.py)  an UPVOTE of a listed insight and an ADD
  AWM induction (memrl_baselines/awm.py)              one workflow of three steps
  anything else                                        "OK."

ALFWorld replies come in two forms: the bare command, or "Thought: ...\\nAction: <command>"
(a chat model ignoring the one-command instruction). The second is used for every reply when
the prompt's instructions (the text before the episode) ask for the Thought/Action format,
and otherwise for a deterministic share `react_rate` of the prompts.

The reply functions read chat messages; `request_messages` turns a request of any route the
fault server serves (chat completions, Gemini's generateContent, embeddings) into them. The
text helpers at the end (`text_of`, `apply_stop`, `embed_text`) are shared with the provider
emulation (memrl.testing.provider).

Expert reply mode (`expert=`): for an ALFWorld episode whose first observation is in the
table, the reply is the next action of that game's recorded expert trajectory
(scripts/bench_throughput.py records them once with agent=expert), so the episode ends when
the expert's did; other games, and steps past the trajectory, get the fixed tour. The table
maps the episode's first observation (the task start the ReAct prompt shows after "Here is
your task.") to the expert's actions.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Mapping, Sequence

# ------------------------------------------------------------------------------ ALFWorld
_RECEPTACLES = re.compile(r"you see (.*?)\.\s*$", re.MULTILINE)
_ITEM = re.compile(r"(?:an?|the)\s+([a-z]+(?: [a-z]+)* \d+)")
EPISODE_MARK = "Here is your task."


def _receptacles(prompt: str) -> list[str]:
    """Receptacles of the episode's room ('you see a cabinet 1, a drawer 2, ...')."""
    episode = prompt.rsplit(EPISODE_MARK, 1)[-1]
    m = _RECEPTACLES.search(episode)
    return _ITEM.findall(m.group(1)) if m else []


def _tour(prompt: str) -> list[str]:
    places = _receptacles(prompt) or ["cabinet 1", "countertop 1", "drawer 1"]
    tour: list[str] = ["look", "think: I should search the receptacles one by one.", "inventory"]
    for place in places:
        tour += [f"go to {place}", f"open {place}", f"examine {place}"]
    return tour


def alfworld_action(prompt: str) -> str:
    """A plausible next ALFWorld command for a ReAct prompt: a fixed tour of the room, as a
    weak agent would make it (look, inventory, then go to / open each receptacle)."""
    episode = prompt.rsplit(EPISODE_MARK, 1)[-1]
    step = sum(1 for line in episode.splitlines() if line.startswith("> "))
    tour = _tour(prompt)
    return tour[step % len(tour)]


def episode_start(prompt: str) -> tuple[str, int]:
    """(the episode's first observation, how many actions it has taken) of a ReAct prompt."""
    episode = prompt.rsplit(EPISODE_MARK + "\n", 1)[-1]
    lines = episode.split("\n")
    head: list[str] = []
    for line in lines:
        if line.startswith("> ") or line == ">":
            break
        head.append(line)
    return "\n".join(head).strip(), sum(1 for line in lines if line.startswith("> "))


def expert_action(prompt: str, trajectories: dict[str, list[str]]) -> str | None:
    """The recorded expert's next action for this prompt's game, or None (not recorded, or
    past the end of its trajectory)."""
    start, step = episode_start(prompt)
    actions = trajectories.get(start)
    return actions[step] if actions is not None and step < len(actions) else None


def asks_thought_action(prompt: str) -> bool:
    """Whether the prompt's instructions (the text before the episode) ask for replies in
    the "Thought: ... / Action: ..." format."""
    head = prompt.rsplit(EPISODE_MARK, 1)[0] if EPISODE_MARK in prompt else ""
    return "Thought:" in head and "Action:" in head


def share(key: str, salt: str = "") -> float:
    """A deterministic number in [0, 1) for `key` (which replies take a variant)."""
    digest = hashlib.sha256(f"{salt}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _thought(action: str) -> str:
    verb, _, rest = action.partition(" ")
    if action.startswith("think:"):
        return action[len("think:"):].strip()
    if verb == "go":
        return f"The object may be at {rest[3:] if rest.startswith('to ') else rest}; I will go there."
    if verb in ("open", "examine"):
        return f"I should look inside {rest} for the object."
    return "First I need to see what is around me."


def thought_action(action: str) -> str:
    """The two-line ReAct form of an ALFWorld command."""
    if action.startswith("think:"):
        return f"Thought: {_thought(action)}\nAction: look"
    return f"Thought: {_thought(action)}\nAction: {action}"


def alfworld_reply(prompt: str, react_rate: float = 0.0, expert: Mapping[str, list[str]] | None = None,
                   context: str = "") -> str:
    """One ALFWorld reply (module doc): the expert's or the tour's command, bare or as
    Thought/Action. `context`: earlier messages (a system prompt), read for the format too."""
    action = expert_action(prompt, dict(expert)) if expert else None
    if action is None:
        action = alfworld_action(prompt)
    asked = asks_thought_action(prompt) or ("Thought:" in context and "Action:" in context)
    if asked or (react_rate > 0 and share(prompt, "react") < react_rate):
        return thought_action(action)
    return " " + action


# ------------------------------------------------------------------------------ other benchmarks
SCRIPT_REPLY = ("1. Find where the object of the task usually is and go there.\n"
                "2. Take it and check the goal receptacle.\n3. Put it in place and confirm.")
# the user turn that opens the task in the ALFWorld chat dialogue (memrl_envs/alfworld/chat.py
# NEW_TASK; memrl.testing imports nothing from the envs, so the text is kept here and a test
# checks the two agree)
ALFWORLD_NEW_TASK = "Now it is your turn, on a new task.\n"
PLAN_REPLY = (" Go to the place where the target object usually is.\n2. Take it.\n"
              "3. Bring it to the goal receptacle and put it there.")
REFLECTION_REPLY = (" The agent toured the room without finding the object; next time it should "
                    "open the receptacles where such objects are usually kept first.")
_DEF = r"^(?:async\s+)?def\s+{name}\s*\((?:[^()]|\([^()]*\))*\)\s*(?:->\s*[^:\n]+)?:"
_ANY_DEF = re.compile(_DEF.format(name=r"([A-Za-z_]\w*)"), re.M)
_IMPORT = re.compile(r"^(?:import\s+\S.*|from\s+\S+\s+import\s+.+)$", re.M)
_TABLE = re.compile(r'^Table information:\s*\{"name":\s*"((?:[^"\\]|\\.)*)"', re.M)
_HLE_ANSWER = re.compile(r"^\s*\**\s*(?:exact\s+answer|final\s+answer|answer)\s*\**\s*:\s*(.+?)\s*$",
                         re.I | re.M)
_HLE_CONF = re.compile(r"confidence\s*\**\s*:\s*\**\s*(\d{1,3}(?:\.\d+)?)", re.I)


def text_of(content: Any) -> str:
    """The text of a chat message's content (a string, or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content
                         if isinstance(p, dict) and p.get("type", "text") == "text")
    return "" if content is None else str(content)


def code_reply(prompt: str) -> str:
    """A ```python block with the task's imports and entry function (task_func when the
    prompt has it), whose body is a stub: it parses and runs, and is usually wrong."""
    # the task's own code: after "Task:" (instruct split) or inside the last opened fence
    region = prompt.rsplit("\nTask:\n", 1)[-1] if "\nSolution:\n```python" in prompt \
        else prompt.rsplit("```python\n", 1)[-1]
    heads = {m.group(1): m.group(0) for m in _ANY_DEF.finditer(region)}
    name = "task_func" if "task_func" in heads else next(reversed(heads), "task_func")
    header = heads.get(name, f"def {name}(*args, **kwargs):")
    imports = list(dict.fromkeys(_IMPORT.findall(region)))
    body = "\n".join(imports + ([""] if imports else []) + [header, "    result = None", "    return result"])
    return f"```python\n{body}\n```"


def os_reply(prompt: str) -> str:
    """Lifelong OS: look at the file system once, then finish."""
    episode = prompt.rsplit("Now your task.", 1)[-1]
    turns = sum(1 for line in episode.splitlines() if line.startswith("Output:"))
    return " bash\n```bash\nls /\n```" if turns == 0 else " finish"


def db_reply(prompt: str) -> str:
    """Lifelong DB: one SELECT on the task's table, then its output as the answer."""
    episode = prompt.rsplit(EPISODE_MARK, 1)[-1]
    outputs = [line[len("Output:"):].strip() for line in episode.splitlines() if line.startswith("Output:")]
    if outputs:
        return f" Answer\nFinal Answer: {outputs[-1]}"
    m = _TABLE.search(episode)
    table = json.loads(f'"{m.group(1)}"') if m else "data"
    return f" Operation\n```sql\nSELECT * FROM `{table.replace('`', '``')}` LIMIT 5;\n```"


def hle_reply(whole: str) -> str:
    """HLE solver: an answer in the solver's format (a letter for a multiple-choice system
    prompt, else a number), at 50% confidence."""
    u = share(whole, "hle")
    if "Answer: <the letter" in whole:
        return (f"Explanation: Comparing the options, this one fits best.\nAnswer: {'ABCDE'[int(u * 5)]}\n"
                "Confidence: 50%")
    return f"Explanation: Working through the question gives this value.\nExact Answer: {int(u * 100)}\n" \
           "Confidence: 50%"


def judge_reply(prompt: str) -> str:
    """HLE judge: compares the response's last stated answer with the reference; answers in
    the form the instructions ask for (a JSON object, or "field: value" lines)."""
    case = prompt.rsplit("\nResponse:\n", 1)[-1]
    response, _, rest = case.partition("\n\nReference answer:\n")
    reference = rest.rsplit("\n\nVerdict:", 1)[0].strip()
    answers = _HLE_ANSWER.findall(response)
    extracted = answers[-1].strip().strip("*").strip() if answers else None
    conf = _HLE_CONF.findall(response)
    correct = extracted is not None and extracted.lower() == reference.lower()
    verdict = {"extracted_final_answer": extracted,
               "reasoning": "The answers match." if correct else "The answers differ.",
               "correct": "yes" if correct else "no",
               "confidence": int(float(conf[-1])) if conf else 100}
    if "plain-text lines" in prompt.split("\nQuestion:\n", 1)[0]:  # the official rule's form
        return "\n".join(f"{k}: {'None' if v is None else v}" for k, v in verdict.items())
    return json.dumps(verdict)


def chat_episode(messages: Sequence[Mapping[str, Any]], marker: str) -> tuple[str, int] | None:
    """(the text of the user turn that opens the episode, the replies since) of an ALFWorld
    chat dialogue (memrl_envs/alfworld/chat.py: its new-task turn starts with `marker`), or None."""
    opens = [i for i, m in enumerate(messages)
             if m.get("role") == "user" and text_of(m.get("content")).startswith(marker)]
    if not opens:
        return None
    start = opens[-1]
    replies = sum(1 for m in messages[start + 1:] if m.get("role") == "assistant")
    return text_of(messages[start].get("content"))[len(marker):], replies


def alfworld_chat_reply(start: str, step: int, expert: Mapping[str, list[str]] | None = None) -> str:
    """One reply of the chat dialogue: the expert's or the tour's command as Thought/Action
    (the dialogue's system prompt asks for that form)."""
    actions = dict(expert).get(start.strip()) if expert else None
    if actions is not None and step < len(actions):
        return thought_action(actions[step])
    tour = _tour(EPISODE_MARK + "\n" + start)
    return thought_action(tour[step % len(tour)])


# ------------------------------------------------------------------------------ memory methods
# The prompts' last lines (memrl_baselines/: judge, reasoningbank, expel_insights, awm; memrl.testing
# imports nothing from them, so the markers are kept here and a test checks they agree)
JUDGE_MARK = '"success" if the attempt completed the task'
ITEMS_TAIL = "# Memory Item 1\n## Title"
OPERATIONS_MARK = "UPVOTE <number>:"
WORKFLOWS_TAIL = "Workflows:\nWorkflow 1:"
INSIGHT_POOL = ("Look at what the room holds and open closed receptacles before deciding an object is absent.",
                "Read the goal of the task again before the last action.",
                "Prefer the actions the environment says are possible.",
                "Do not repeat an action that changed nothing.")
ITEMS_REPLY = (" Search the likely places first\n## Description Use when the object of the task is not in sight.\n"
               "## Content Visit the receptacles where such objects are usually kept, opening closed ones, "
               "before searching elsewhere.\n\n# Memory Item 2\n## Title Confirm the goal\n## Description Use "
               "before the last action of a task.\n## Content Re-read the task and check that the object and "
               "its destination match it.")
WORKFLOW_REPLY = (" Fetch an object and place it\n1. Go to {place} where {object} is usually kept.\n"
                  "2. Take {object} from {place}.\n3. Go to {target} and put {object} there.")


def judge_verdict_reply(prompt: str) -> str:
    """Self-judgment: the verdict (success for half of the prompts), a dash, a reason."""
    ok = share(prompt, "judge") < 0.5
    return f" {'success' if ok else 'failure'} - the agent's actions " + \
        ("reached" if ok else "did not reach") + " the state the task asked for."


def operations_reply(prompt: str) -> str:
    """ExpeL: an UPVOTE of one listed insight (copied) and an ADD of one not listed yet."""
    listed = prompt.rsplit("Current insights:\n", 1)[-1].split("\n\n", 1)[0]
    current = re.findall(r"^(\d+)\. (.+)$", listed, re.M)
    lines = []
    if current:
        n, text = current[int(share(prompt, "up") * len(current))]
        lines.append(f"UPVOTE {n}: {text}")
    new = INSIGHT_POOL[int(share(prompt, "add") * len(INSIGHT_POOL))]
    if all(new not in text for _, text in current):
        lines.append(f"ADD {len(current) + 1}: {new}")
    return "\n".join(lines)


def memory_method_reply(last: str) -> str | None:
    """The reply to a memory method's own prompt, or None for another prompt."""
    tail = last.rstrip()
    if tail.endswith("Status:") and JUDGE_MARK in last:
        return judge_verdict_reply(last)
    if tail.endswith(ITEMS_TAIL):
        return ITEMS_REPLY
    if tail.endswith("Operations:") and OPERATIONS_MARK in last:
        return operations_reply(last)
    if tail.endswith(WORKFLOWS_TAIL):
        return WORKFLOW_REPLY
    return None


def reply_for(messages: Sequence[Mapping[str, Any]], react_rate: float = 0.0,
              expert: Mapping[str, list[str]] | None = None) -> str:
    """The normal (unfaulted) reply to a chat request (module doc)."""
    last = text_of(messages[-1].get("content")) if messages else ""
    whole = "\n\n".join(text_of(m.get("content")) for m in messages)
    tail = last.rstrip()
    if tail.endswith("Plan:\n1.") or "Plan:\n1." in last[-20:]:
        return PLAN_REPLY
    if tail.endswith("High-level script:"):  # the official writer's script (memrl.memory.writer)
        return SCRIPT_REPLY
    if tail.endswith("Reflection:"):
        return REFLECTION_REPLY
    method = memory_method_reply(last)
    if method is not None:
        return method
    if tail.endswith("Verdict:") and "\nReference answer:\n" in last:
        return judge_reply(last)
    if "Explanation:" in whole and "Confidence:" in whole and "Question:" in last:
        return hle_reply(whole)
    if tail.endswith("Action:") and "Now your task." in last and "Action: bash" in last:
        return os_reply(last)
    if tail.endswith("Action:") and EPISODE_MARK in last and "Action: Operation" in last:
        return db_reply(last)
    if "```python\n" in last and _ANY_DEF.search(last) is not None:
        return code_reply(last)
    if EPISODE_MARK in last or tail.endswith(">"):
        return alfworld_reply(last, react_rate, expert, whole[:len(whole) - len(last)])
    chat = chat_episode(messages, ALFWORLD_NEW_TASK)
    if chat is not None:
        return alfworld_chat_reply(*chat, expert)
    return "OK."


# ------------------------------------------------------------------------------ requests and text
def gemini_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A generateContent body as chat messages (system instruction first, model -> assistant)."""
    def parts_text(content: Any) -> str:
        parts = content.get("parts") if isinstance(content, Mapping) else None
        return "".join(str(p.get("text", "[inline data]")) for p in parts or [] if isinstance(p, Mapping))
    out = []
    system = body.get("systemInstruction", body.get("system_instruction"))
    if system:
        out.append({"role": "system", "content": parts_text(system)})
    for c in body.get("contents") or []:
        role = "assistant" if isinstance(c, Mapping) and c.get("role") == "model" else "user"
        out.append({"role": role, "content": parts_text(c)})
    return out


def request_messages(route: str, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A request's prompt as chat messages (what replies, fault rules and caching read)."""
    if route == "gemini":
        return gemini_messages(body)
    if route == "embeddings":
        return [{"role": "user", "content": json.dumps(body.get("input"))}]
    if not isinstance(body, Mapping):
        raise TypeError("the request body is not a JSON object")
    return list(body.get("messages") or [])


def apply_stop(text: str, stop: Any) -> str:
    """The text up to the first stop sequence."""
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    cut = min([i for i in (text.find(s) for s in stops if s) if i >= 0], default=len(text))
    return text[:cut]


_WORD = re.compile(r"[a-z0-9]+")


def embed_text(text: str, dims: int) -> list[float]:
    """A deterministic unit vector: a signed hashed bag of the text's words, so texts that
    share words are similar."""
    vec = [0.0] * dims
    for word in _WORD.findall(text.lower()) or [text]:
        h = int.from_bytes(hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
        vec[h % dims] += 1.0 if (h >> 63) & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0.0:  # the words cancelled out
        vec[0], norm = 1.0, 1.0
    return [x / norm for x in vec]
