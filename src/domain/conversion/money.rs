//! Exact money: a value is an integer count of its currency's minor unit (cents, fils, yen),
//! with the exponent from ISO 4217 (`iso_currency`), from the request's decimal text to the
//! sums, which are 128-bit per currency and answered as decimal strings. No floating point
//! anywhere: 0.10 + 0.20 is 30 cents, never 0.30000000000000004.

use std::collections::BTreeMap;
use std::fmt;

/// The largest value one conversion may carry, in whole units of any currency.
const MAX_WHOLE_UNITS: i64 = 1_000_000_000_000;

/// An ISO 4217 currency that has a minor unit (so not XAU or XDR, which are not money a
/// conversion is paid in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency {
    code: iso_currency::Currency,
    exponent: u8,
}

/// Why a value or currency is refused; the message names what is wrong, the caller the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("is not an ISO 4217 currency code with a minor unit (e.g. EUR, JPY, KWD)")]
    UnknownCurrency,
    #[error(
        "must be a decimal string such as \"12.50\": digits, at most one '.', no sign or exponent"
    )]
    NotDecimal,
    #[error("has {given} decimals; {currency} has {allowed}")]
    TooManyDecimals {
        given: usize,
        allowed: u8,
        currency: &'static str,
    },
    #[error("is over the limit of 10^12")]
    TooLarge,
}

impl Currency {
    /// The currency of an upper-case ISO 4217 code.
    pub fn from_code(code: &str) -> Result<Self, MoneyError> {
        let currency =
            iso_currency::Currency::from_code(code).ok_or(MoneyError::UnknownCurrency)?;
        let exponent = currency
            .exponent()
            .and_then(|exponent| u8::try_from(exponent).ok())
            .filter(|exponent| *exponent <= 4)
            .ok_or(MoneyError::UnknownCurrency)?;
        Ok(Self {
            code: currency,
            exponent,
        })
    }

    pub fn code(&self) -> &'static str {
        self.code.code()
    }

    /// Digits after the decimal point of the minor unit: EUR 2, JPY 0, KWD 3.
    pub fn exponent(&self) -> u8 {
        self.exponent
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// One conversion's value: whole minor units of a currency, 0 ..= 10^12 whole units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Money {
    pub(crate) currency: Currency,
    pub(crate) minor: i64,
}

impl Money {
    /// Reads a decimal string (`"12.5"`, `"300"`, `"0.125"`) in `currency`.
    pub fn parse(text: &str, currency: Currency) -> Result<Self, MoneyError> {
        let (whole, fraction) = match text.split_once('.') {
            Some((whole, fraction)) if !fraction.is_empty() => (whole, fraction),
            Some(_) => return Err(MoneyError::NotDecimal),
            None => (text, ""),
        };
        let digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) {
            return Err(MoneyError::NotDecimal);
        }
        let allowed = currency.exponent;
        // Trailing zeros count too, as the contract words it: "1.100" EUR claims a precision
        // the currency does not have, which a client should hear about rather than see dropped.
        if fraction.len() > usize::from(allowed) {
            return Err(MoneyError::TooManyDecimals {
                given: fraction.len(),
                allowed,
                currency: currency.code(),
            });
        }
        let whole = whole.trim_start_matches('0');
        // More than 13 digits is over 10^12 before any arithmetic can overflow.
        if whole.len() > 13 {
            return Err(MoneyError::TooLarge);
        }
        let whole: i64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| MoneyError::NotDecimal)?
        };
        if whole > MAX_WHOLE_UNITS {
            return Err(MoneyError::TooLarge);
        }
        let scale = 10_i64.pow(u32::from(allowed));
        let mut minor_part: i64 = 0;
        for position in 0..usize::from(allowed) {
            let digit = fraction
                .as_bytes()
                .get(position)
                .map_or(0, |byte| i64::from(byte - b'0'));
            minor_part = minor_part * 10 + digit;
        }
        let minor = whole * scale + minor_part;
        if minor > MAX_WHOLE_UNITS * scale {
            return Err(MoneyError::TooLarge);
        }
        Ok(Self { currency, minor })
    }

    /// The value as a decimal string with the currency's minor digits, as it was posted.
    pub(crate) fn to_decimal_string(self) -> String {
        decimal(i128::from(self.minor), self.currency.exponent)
    }

    /// A value read back from the store, in minor units.
    pub(crate) fn from_minor(currency: Currency, minor: i64) -> Option<Self> {
        (minor >= 0).then_some(Self { currency, minor })
    }
}

/// Sums of values per currency, exact whatever their number (each at most 10^16 minor units,
/// so 10^22 conversions fit in 128 bits).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValueSums(BTreeMap<Currency, i128>);

impl ValueSums {
    pub(crate) fn add_money(&mut self, money: Money) {
        *self.0.entry(money.currency).or_default() += i128::from(money.minor);
    }

    /// Each currency and its sum in minor units, by currency code.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (Currency, i128)> + '_ {
        self.0.iter().map(|(currency, minor)| (*currency, *minor))
    }

    /// Sums back from [`entries`](Self::entries).
    pub(crate) fn from_entries(entries: impl IntoIterator<Item = (Currency, i128)>) -> Self {
        let mut sums = Self::default();
        for (currency, minor) in entries {
            *sums.0.entry(currency).or_default() += minor;
        }
        sums
    }

    pub(crate) fn add(&mut self, other: &ValueSums) {
        for (currency, minor) in &other.0 {
            *self.0.entry(*currency).or_default() += minor;
        }
    }

    /// Each currency's sum, in the currency table's order, to break ties between rows: rows
    /// valued in one currency (the usual case) order by that sum; between currencies there is
    /// no rate to compare by, so their order is only deterministic.
    pub(crate) fn ordering_key(&self) -> Vec<(Currency, i128)> {
        self.0.iter().map(|(c, v)| (*c, *v)).collect()
    }

    /// Each currency's sum as a decimal string with the currency's minor digits:
    /// `{"EUR": "1234.50", "JPY": "300"}`.
    pub(crate) fn to_decimal_strings(&self) -> BTreeMap<&'static str, String> {
        self.0
            .iter()
            .map(|(currency, minor)| (currency.code(), decimal(*minor, currency.exponent)))
            .collect()
    }
}

/// `minor` minor units with `exponent` digits after the point.
fn decimal(minor: i128, exponent: u8) -> String {
    let digits = minor.unsigned_abs().to_string();
    let sign = if minor < 0 { "-" } else { "" };
    let exponent = usize::from(exponent);
    if exponent == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = exponent + 1);
    let (whole, fraction) = padded.split_at(padded.len() - exponent);
    format!("{sign}{whole}.{fraction}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn currency(code: &str) -> Currency {
        Currency::from_code(code).expect("a currency")
    }

    #[test]
    fn values_become_minor_units_of_their_currency() {
        let minor = |text, code| Money::parse(text, currency(code)).map(|money| money.minor);
        assert_eq!(minor("12.5", "EUR"), Ok(1250));
        assert_eq!(minor("12.50", "EUR"), Ok(1250));
        assert_eq!(minor("0.01", "EUR"), Ok(1));
        assert_eq!(minor("300", "JPY"), Ok(300));
        assert_eq!(minor("1.125", "KWD"), Ok(1125));
        assert_eq!(minor("1000000000000", "EUR"), Ok(100_000_000_000_000));
        assert_eq!(minor("007.10", "EUR"), Ok(710));
    }

    #[test]
    fn values_that_are_not_exact_decimals_in_range_are_refused() {
        let parse = |text, code| Money::parse(text, currency(code));
        for text in [
            "", "-1", "+1", "1e3", "1.", ".5", "1,50", "1.2.3", " 1", "0x10", "NaN",
        ] {
            assert_eq!(parse(text, "EUR"), Err(MoneyError::NotDecimal), "{text:?}");
        }
        assert!(matches!(
            parse("1.5", "JPY"),
            Err(MoneyError::TooManyDecimals { allowed: 0, .. })
        ));
        assert!(matches!(
            parse("1.001", "EUR"),
            Err(MoneyError::TooManyDecimals { allowed: 2, .. })
        ));
        for (text, code) in [("1.100", "EUR"), ("300.0", "JPY"), ("0.5000", "KWD")] {
            assert!(
                matches!(parse(text, code), Err(MoneyError::TooManyDecimals { .. })),
                "{text} {code}"
            );
        }
        assert_eq!(parse("1.10", "EUR").map(|m| m.minor), Ok(110));
        assert_eq!(parse("0.500", "KWD").map(|m| m.minor), Ok(500));
        assert_eq!(parse("1000000000000.01", "EUR"), Err(MoneyError::TooLarge));
        assert_eq!(
            parse("99999999999999999999", "EUR"),
            Err(MoneyError::TooLarge)
        );
    }

    #[test]
    fn only_iso_currencies_with_a_minor_unit_are_money() {
        assert_eq!(currency("KWD").exponent(), 3);
        assert_eq!(currency("JPY").exponent(), 0);
        for code in ["XAU", "eur", "EURO", "", "ZZZ"] {
            assert_eq!(
                Currency::from_code(code),
                Err(MoneyError::UnknownCurrency),
                "{code:?}"
            );
        }
    }

    #[test]
    fn sums_are_exact_where_floats_are_not() {
        let eur = currency("EUR");
        let mut sums = ValueSums::default();
        for text in ["0.10", "0.20"] {
            sums.add_money(Money::parse(text, eur).expect("valid"));
        }
        assert_eq!(sums.to_decimal_strings()["EUR"], "0.30");
        let mut big = ValueSums::default();
        for _ in 0..1000 {
            big.add_money(Money::parse("1000000000000", currency("KWD")).expect("valid"));
        }
        assert_eq!(big.to_decimal_strings()["KWD"], "1000000000000000.000");
        let mut small = ValueSums::default();
        small.add_money(Money::parse("0.005", currency("KWD")).expect("valid"));
        small.add_money(Money::parse("7", currency("JPY")).expect("valid"));
        assert_eq!(small.to_decimal_strings()["KWD"], "0.005");
        assert_eq!(small.to_decimal_strings()["JPY"], "7");
    }
}
