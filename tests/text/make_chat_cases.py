"""Chat-template cases rendered by transformers' apply_chat_template, for chat_template_test.cpp.

usage: make_chat_cases.py OUT.json

Templates in the shapes of Llama 3, ChatML with tools (Qwen 2.5), Mistral and Gemma, and one that
exercises the rest of the engine (namespaces, macros, filters, slices, loop variables, whitespace
control under trim_blocks/lstrip_blocks); conversations with system, user, assistant and tool
turns, with and without the generation prompt. A case whose template raises records the message.
"""
import json
import sys

from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
          "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
          "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

CHATML = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

MISTRAL = r"""{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

GEMMA = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
         "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
         "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
         "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
         "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
         "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}")

# The rest of the engine: indented blocks without '-' (trim_blocks, lstrip_blocks), namespaces,
# macros with defaults, filters, tests, slices, loop variables, arithmetic, dict methods, tojson.
SOUP = r"""{% macro turn(role, text, tag='msg') -%}
<{{ tag }} role="{{ role | upper }}">{{ text | trim }}</{{ tag }}>
{%- endmacro %}
{% set ns = namespace(users=0, last_user=-1, seen=[]) %}
{% for m in messages %}
    {% if m.role == 'user' %}
        {% set ns.users = ns.users + 1 %}
        {% set ns.last_user = loop.index0 %}
    {% endif %}
{% endfor %}
{{ bos_token }}users={{ ns.users }} last={{ ns.last_user }} n={{ messages | length }}
{% for m in messages if m.role != 'tool' %}
{{ loop.index }}/{{ loop.length }}{% if loop.first %} first{% endif %}{% if loop.last %} last{% endif %}: {{ turn(m.role, m.content) }}
{% if m.tool_calls is defined and m.tool_calls %}
  calls: {{ m.tool_calls | map(attribute='function') | map(attribute='name') | join(', ') }}
  args: {{ m.tool_calls[0].function.arguments | tojson(indent=2) }}
{% endif %}
{% endfor %}
{% set names = messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list %}
first words: {% for n in names %}{{ n.split()[0] | lower }}{{ ',' if not loop.last }}{% endfor %}

tail: {{ messages[-1].content[:12] }}|{{ messages[-1].content[::-1][:5] }}
{% for k, v in {'a': 1, 'b': [1, 2.5, none, true], 'c': {'d': 'x'}}.items() %}{{ k }}={{ v }};{% endfor %}

math: {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 0 if false else 10 / 4 }} {{ 'ab' * 2 }} {{ 1 ~ 'x' ~ none }}
tests: {{ none is none }} {{ 3 is odd }} {{ 'x' is string }} {{ messages is sequence }} {{ missing is defined }} {{ 6 is divisibleby 3 }}
{{ (messages | last).get('role', 'none') }} {{ tools | default([]) | length }} {{ 'A-b c'.replace('-', '+').title() }} {{ '  pad  '.strip() ~ '|' }}
{%- if add_generation_prompt %}
<gen>
{%- endif %}
"""

TEMPLATES = {"llama3": LLAMA3, "chatml": CHATML, "mistral": MISTRAL, "gemma": GEMMA, "soup": SOUP}

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"},
                                                           "unit": {"type": "string", "enum": ["c", "f"]}},
                          "required": ["city"]}}}

CONVERSATIONS = {
    "plain": [{"role": "user", "content": "Hello! Who wrote Emma?"},
              {"role": "assistant", "content": "  Jane Austen, in 1815.  "},
              {"role": "user", "content": "And Persuasion?\nBriefly."}],
    "system": [{"role": "system", "content": "You are terse."},
               {"role": "user", "content": "Name a novel \u00e9crit by Austen \U0001F600"},
               {"role": "assistant", "content": "Sense and Sensibility."},
               {"role": "user", "content": "Another?"}],
    "tools": [{"role": "system", "content": "Use tools."},
              {"role": "user", "content": "Weather in Bath?"},
              {"role": "assistant", "content": "",
               "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Bath", "unit": "c"}}}]},
              {"role": "tool", "content": "{\"temp\": 14.5, \"sky\": \"rain\"}"},
              {"role": "tool", "content": "second result"},
              {"role": "assistant", "content": "It is 14.5 C and raining in Bath."},
              {"role": "user", "content": "Thanks"}],
    "bad_order": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
}


def main(out):
    raw = Tokenizer(models.BPE())
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>")
    cases = []
    for tname, template in TEMPLATES.items():
        for cname, messages in CONVERSATIONS.items():
            for gen in (False, True):
                tools = [WEATHER] if cname == "tools" else None
                # What transformers passes the template: tools and documents always (None when absent).
                context = {"messages": messages, "tools": tools, "documents": None, "add_generation_prompt": gen,
                           "bos_token": "<s>", "eos_token": "</s>"}
                case = {"template": tname, "conversation": cname, "source": template, "context": context}
                try:
                    case["expected"] = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen,
                                                               tokenize=False, chat_template=template)
                except Exception as e:  # the template raised
                    case["error"] = str(e)
                cases.append(case)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1])
