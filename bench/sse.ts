/** Each `data:` event of a streamed answer (OpenAI's SSE), parsed, as it arrives; `[DONE]` and other lines skipped. */
export async function* sseData(res: Response): AsyncGenerator<Record<string, unknown>> {
  if (!res.body) return;
  let buf = '';
  const dec = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += dec.decode(chunk, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (ev.startsWith('data: ') && ev !== 'data: [DONE]') yield JSON.parse(ev.slice(6)) as Record<string, unknown>;
    }
  }
}
