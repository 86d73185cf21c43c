import pytest

from serving.chat_template import ChatTemplate, TemplateError
from serving.reasoning import ReasoningSplitter, prompt_opens_reasoning
from serving.stops import StopMatcher
from serving.textcodec import IncrementalDecoder, TextCodec


def _split(chunks, start):
    splitter = ReasoningSplitter(start_in_reasoning=start)
    parts = []
    for chunk in chunks:
        parts += splitter.push(chunk)
    parts += splitter.flush()
    merged = {}
    for kind, text in parts:
        merged[kind] = merged.get(kind, "") + text
    return merged


def test_reasoning_split_across_chunk_boundaries():
    assert _split(["Let me th", "ink.</th", "ink>\n\nThe answer", " is 5."], True) == {
        "reasoning": "Let me think.", "content": "The answer is 5."}


def test_model_that_opens_think_itself_enters_reasoning():
    assert _split(["<thi", "nk>hmm</think>\n\nok"], False) == {"reasoning": "hmm", "content": "ok"}


def test_think_tag_inside_content_stays_content():
    assert _split(["The tag <think> is text"], False) == {"content": "The tag <think> is text"}


def test_unclosed_reasoning_is_all_reasoning():
    assert _split(["still thinking <", "/thi"], True) == {"reasoning": "still thinking </thi"}


def test_prompt_opens_reasoning():
    assert prompt_opens_reasoning("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_reasoning("<|im_start|>user\nhi<|im_end|>\n")


def test_stop_strings_are_held_then_cut():
    m = StopMatcher(("STOP", "\n\n"))
    assert [m.push(x) for x in ["abc S", "TO", "xx", "ST", "OP tail"]] == ["abc ", "", "STOxx", "", ""]
    assert m.stopped and m.flush() == ""


def test_held_text_is_released_at_the_end():
    m = StopMatcher(("STOP",))
    assert m.push("abc ST") == "abc "
    assert m.flush() == "ST"


def test_incremental_decoder_matches_full_decode(tiny_model_dir):
    codec = TextCodec(tiny_model_dir)
    text = "Héllo wörld 日本 <think>x</think> 12 + 3 = 15"
    ids = codec.encode(text)
    decoder = IncrementalDecoder(codec)
    assert "".join(decoder.push(i) for i in ids) == codec.decode(ids) == text


def test_token_bytes_reassemble_utf8(tiny_model_dir):
    codec = TextCodec(tiny_model_dir)
    ids = codec.encode("日本")
    assert b"".join(codec.token_bytes(i) for i in ids).decode() == "日本"


def test_chat_template_renders_thinking_switch(tiny_model_dir):
    template = ChatTemplate.from_model_dir(tiny_model_dir)
    messages = [{"role": "user", "content": "Hi"}]
    assert template.render(messages).endswith("<|im_start|>assistant\n<think>\n")
    assert template.render(messages, enable_thinking=False).endswith("<think>\n\n</think>\n\n")


def test_template_raise_exception_is_a_template_error():
    template = ChatTemplate("{{ raise_exception('no system role') }}")
    with pytest.raises(TemplateError, match="no system role"):
        template.render([])
