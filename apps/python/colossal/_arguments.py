"""Keyword arguments as the binaries' command-line arguments, so every app function takes exactly
the flags its CLI does (train_llama --help, train_vit --help list them)."""


def command_line(flags):
    """{"max_steps": 10, "plugin": "zero2", "dataset": ["a.jsonl", "b.jsonl"], "stream": True}
    -> ["--max_steps", "10", "--plugin", "zero2", "--dataset", "a.jsonl", "b.jsonl", "--stream=true"].
    None leaves a flag out; booleans are spelled out, so False reaches the app too."""
    args = []
    for name, value in flags.items():
        if value is None:
            continue
        flag = "--" + name
        if isinstance(value, bool):
            args.append(f"{flag}={'true' if value else 'false'}")
        elif isinstance(value, (list, tuple)):
            args.append(flag)
            args.extend(str(v) for v in value)
        else:
            args.extend([flag, str(value)])
    return args
