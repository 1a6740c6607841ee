//! Half-open constituent spans over word positions.

/// A constituent span over word positions: words `start..end` (half-open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    /// First word (inclusive).
    pub start: usize,
    /// One past the last word (exclusive).
    pub end: usize,
}

impl Span {
    /// The span of words `start..end`.
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }

    /// Number of words covered.
    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// Whether the span covers no word.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the two spans overlap without one containing the other.
    pub fn crosses(&self, other: &Span) -> bool {
        (self.start < other.start && other.start < self.end && self.end < other.end)
            || (other.start < self.start && self.start < other.end && other.end < self.end)
    }

    /// Whether `other` lies inside `self` (equal spans count).
    pub fn contains(&self, other: &Span) -> bool {
        self.start <= other.start && other.end <= self.end
    }
}
