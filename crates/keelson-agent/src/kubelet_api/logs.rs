//! Container logs as `kubectl logs` reads them: the CRI log files the runtime writes
//! (`<RFC3339Nano> <stream> <P|F> <message>`, partial lines joined) turned into the
//! container's output, with the PodLogOptions `timestamps`, `sinceSeconds`/`sinceTime`,
//! `tailLines` and `limitBytes` applied. Pure: the server feeds it file contents.

/// One logical line of a container's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// As written (RFC 3339 with nanoseconds).
    pub timestamp: String,
    pub nanos: i128,
    pub stream: String,
    /// The message with its newline (a final partial line has none).
    pub message: String,
}

/// What to show (the query of `pods/log`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<usize>,
    pub limit_bytes: Option<usize>,
    /// Only lines at or after this time (ns since the epoch).
    pub since_nanos: Option<i128>,
}

impl LogOptions {
    /// From the query string; `now_nanos` anchors `sinceSeconds`.
    pub fn from_query(q: &std::collections::HashMap<String, String>, now_nanos: i128) -> Result<Self, String> {
        let flag = |k: &str| q.get(k).is_some_and(|v| v == "true" || v == "1");
        let num = |k: &str| -> Result<Option<i64>, String> {
            q.get(k).map(|v| v.parse::<i64>().map_err(|_| format!("{k}: {v:?} is not a number"))).transpose()
        };
        let since_nanos = match (num("sinceSeconds")?, q.get("sinceTime")) {
            (Some(s), _) if s > 0 => Some(now_nanos - s as i128 * 1_000_000_000),
            (Some(_), _) => return Err("sinceSeconds: must be greater than 0".into()),
            (None, Some(t)) => Some(t.parse::<jiff::Timestamp>().map_err(|e| format!("sinceTime: {e}"))?.as_nanosecond()),
            (None, None) => None,
        };
        Ok(Self {
            follow: flag("follow"),
            previous: flag("previous"),
            timestamps: flag("timestamps"),
            tail_lines: num("tailLines")?.map(|n| n.max(0) as usize),
            limit_bytes: num("limitBytes")?.map(|n| n.max(0) as usize),
            since_nanos,
        })
    }
}

/// Parses CRI log text into lines, joining partial (`P`) records with what follows.
/// A trailing record without its newline is left for the next read: the returned count
/// is how many bytes were consumed.
pub fn parse(text: &str) -> (Vec<LogLine>, usize) {
    let mut out = Vec::new();
    let mut pending: Option<LogLine> = None;
    let mut consumed = 0;
    let mut offset = 0;
    for raw in text.split_inclusive('\n') {
        offset += raw.len();
        if !raw.ends_with('\n') {
            break;
        }
        let record = &raw[..raw.len() - 1];
        let mut parts = record.splitn(4, ' ');
        let (Some(ts), Some(stream), Some(tag), msg) = (parts.next(), parts.next(), parts.next(), parts.next().unwrap_or("")) else {
            consumed = offset;
            continue;
        };
        let partial = tag.split(':').next() == Some("P");
        let nanos = ts.parse::<jiff::Timestamp>().map(|t| t.as_nanosecond()).unwrap_or(0);
        let line = pending.get_or_insert_with(|| LogLine { timestamp: ts.to_string(), nanos, stream: stream.to_string(), message: String::new() });
        line.message.push_str(msg);
        if !partial {
            line.message.push('\n');
            out.push(pending.take().expect("just set"));
            consumed = offset;
        }
    }
    (out, consumed)
}

/// [`parse`] of raw log bytes: the complete records at their start, and how many bytes
/// they took. Invalid UTF-8 (a container may write anything) is replaced; the byte
/// count is then up to the last newline, so no record is read twice.
pub fn parse_bytes(pending: &[u8]) -> (Vec<LogLine>, usize) {
    match String::from_utf8_lossy(pending) {
        std::borrow::Cow::Borrowed(text) => parse(text),
        std::borrow::Cow::Owned(text) => {
            let (lines, _) = parse(&text);
            (lines, pending.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1))
        }
    }
}

/// Renders lines as `kubectl logs` prints them.
pub fn render(lines: &[LogLine], timestamps: bool) -> String {
    let mut s = String::new();
    for l in lines {
        if timestamps {
            s.push_str(&l.timestamp);
            s.push(' ');
        }
        s.push_str(&l.message);
    }
    s
}

/// Applies `sinceTime`/`sinceSeconds` and `tailLines` to what is in the file now.
pub fn select(lines: Vec<LogLine>, o: &LogOptions) -> Vec<LogLine> {
    let mut s = Selector::new(o);
    let mut out = s.feed(lines);
    out.extend(s.finish());
    out
}

/// [`select`] over a file read a chunk at a time: without `tailLines` each chunk's lines
/// go out as they are read; with it only the last N are kept (memory bounded by N, not
/// by the file), and go out at the end.
pub struct Selector {
    since_nanos: Option<i128>,
    tail: Option<(usize, std::collections::VecDeque<LogLine>)>,
}

impl Selector {
    pub fn new(o: &LogOptions) -> Self {
        Self { since_nanos: o.since_nanos, tail: o.tail_lines.map(|n| (n, std::collections::VecDeque::new())) }
    }

    /// The lines of one chunk to send now.
    pub fn feed(&mut self, lines: Vec<LogLine>) -> Vec<LogLine> {
        let since = self.since_nanos;
        let kept = lines.into_iter().filter(|l| since.is_none_or(|s| l.nanos >= s));
        match &mut self.tail {
            None => kept.collect(),
            Some((n, ring)) => {
                for l in kept {
                    ring.push_back(l);
                    if ring.len() > *n {
                        ring.pop_front();
                    }
                }
                Vec::new()
            }
        }
    }

    /// What is left to send once the file has been read to its end.
    pub fn finish(self) -> Vec<LogLine> {
        self.tail.map(|(_, ring)| ring.into_iter().collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "2026-01-01T00:00:01.000000001Z stdout F one\n2026-01-01T00:00:02.5Z stderr F two\n2026-01-01T00:00:03Z stdout P thr\n2026-01-01T00:00:03.1Z stdout F ee\n2026-01-01T00:00:04Z stdout F fo";

    #[test]
    fn records_become_lines_and_partials_join() {
        let (lines, used) = parse(LOG);
        assert_eq!(lines.iter().map(|l| l.message.as_str()).collect::<Vec<_>>(), ["one\n", "two\n", "three\n"]);
        assert_eq!(&LOG[used..], "2026-01-01T00:00:04Z stdout F fo", "an unfinished record waits");
        assert_eq!(lines[1].stream, "stderr");
        assert_eq!(render(&lines[..1], true), "2026-01-01T00:00:01.000000001Z one\n");
    }

    #[test]
    fn bytes_are_consumed_exactly_and_invalid_utf8_replaced() {
        let raw = b"2026-01-01T00:00:00Z stdout F one\n2026-01-01T00:00:01Z stdout F t";
        let (lines, used) = parse_bytes(raw);
        assert_eq!((lines.len(), used), (1, 34), "the unfinished record waits for the next read");
        let bad = b"2026-01-01T00:00:00Z stdout F \xff\xfe\n2026-01-01T00:00:01Z stdout F x";
        let (lines, used) = parse_bytes(bad);
        assert_eq!(lines[0].message, "\u{fffd}\u{fffd}\n");
        assert_eq!(used, 33, "up to the last newline, in bytes");
    }

    #[test]
    fn tail_and_since_select_lines() {
        let (lines, _) = parse(LOG);
        let o = LogOptions { tail_lines: Some(2), ..Default::default() };
        assert_eq!(render(&select(lines.clone(), &o), false), "two\nthree\n");
        let since = "2026-01-01T00:00:02Z".parse::<jiff::Timestamp>().unwrap().as_nanosecond();
        let o = LogOptions { since_nanos: Some(since), ..Default::default() };
        assert_eq!(render(&select(lines, &o), false), "two\nthree\n");
    }

    #[test]
    fn a_file_read_in_chunks_selects_what_the_whole_would() {
        let text: String = (0..50).map(|i| format!("2026-01-01T00:00:{i:02}Z stdout {} l{i}\n", if i % 7 == 3 { "P" } else { "F" })).collect();
        let (all, _) = parse(&text);
        let since = "2026-01-01T00:00:20Z".parse::<jiff::Timestamp>().unwrap().as_nanosecond();
        for o in [
            LogOptions::default(),
            LogOptions { tail_lines: Some(5), ..Default::default() },
            LogOptions { tail_lines: Some(0), ..Default::default() },
            LogOptions { tail_lines: Some(500), ..Default::default() },
            LogOptions { tail_lines: Some(3), since_nanos: Some(since), ..Default::default() },
            LogOptions { since_nanos: Some(since), ..Default::default() },
        ] {
            let whole = select(all.clone(), &o);
            for chunk in [1, 7, 100] {
                let (mut pending, mut out, mut s) = (Vec::<u8>::new(), Vec::new(), Selector::new(&o));
                for piece in text.as_bytes().chunks(chunk) {
                    pending.extend_from_slice(piece);
                    let (lines, used) = parse_bytes(&pending);
                    pending.drain(..used);
                    out.extend(s.feed(lines));
                }
                out.extend(s.finish());
                assert_eq!(out, whole, "{o:?} in chunks of {chunk} bytes");
            }
        }
        let tail = select(all, &LogOptions { tail_lines: Some(2), ..Default::default() });
        assert_eq!(render(&tail, false), "l48\nl49\n");
    }

    #[test]
    fn query_options() {
        let q = [("follow", "true"), ("tailLines", "5"), ("sinceSeconds", "10")].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let o = LogOptions::from_query(&q, 100_000_000_000).unwrap();
        assert!(o.follow && !o.previous);
        assert_eq!((o.tail_lines, o.since_nanos), (Some(5), Some(90_000_000_000)));
        let bad = [("tailLines", "x")].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(LogOptions::from_query(&bad, 0).is_err());
    }
}
